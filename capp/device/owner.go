package device

import (
	"fmt"
	"slices"
	"strings"
)

// Tags of a machine's device and of a cluster's endpoint reservation. The
// provider writes them; spec.tags may not carry them (ReservedTagPrefixes).
const (
	// MachineTagPrefix + the PacketMachine's UID identifies a device:
	// exactly one device of the project carries it.
	MachineTagPrefix = "cluster-api-provider-packet:machine-uid:"
	// ClusterTagPrefix + the cluster name groups a cluster's devices and
	// its endpoint's reservation.
	ClusterTagPrefix = "cluster-api-provider-packet:cluster-id:"
	// NamespaceTagPrefix + the namespace of the machine (or cluster): with
	// the cluster tag it proves a device or reservation is the cluster's
	// after `clusterctl move`, which gives the objects new UIDs.
	NamespaceTagPrefix = "cluster-api-provider-packet:namespace:"
	// EndpointTagPrefix + the PacketCluster's UID identifies the
	// reservation of its endpoint.
	EndpointTagPrefix = "cluster-api-provider-packet:packetcluster-uid:"
	// ControlPlaneTag and WorkerTag give a device's role.
	ControlPlaneTag = "kubernetes.io/role:control-plane"
	WorkerTag       = "kubernetes.io/role:node"
)

// The tags upstream CAPP wrote on its devices: machine-uid (with the
// machine's name, despite the tag's name), cluster-id and namespace.
const (
	upstreamMachineTagPrefix   = "capp:machine-uid:"
	upstreamClusterTagPrefix   = "capp:cluster-id:"
	upstreamNamespaceTagPrefix = "capp:namespace:"
)

// reservedTagPrefixes start the tags that prove ownership: a user's
// spec.tags carrying one could pass a device off as another machine's. The
// PacketMachine's CEL rule on spec.tags refuses the same.
var reservedTagPrefixes = []string{
	"cluster-api-provider-packet:", upstreamMachineTagPrefix, upstreamClusterTagPrefix, upstreamNamespaceTagPrefix,
}

// Reserved reports whether tag is one only the provider writes.
func Reserved(tag string) bool {
	return slices.ContainsFunc(reservedTagPrefixes, func(p string) bool { return strings.HasPrefix(tag, p) })
}

// Tags are the tags of a machine's device: the user's, less any reserved
// one (which a machine stored before the API refused them may hold), then
// the identifying ones.
func Tags(user []string, owner Owner, controlPlane bool) []string {
	role := WorkerTag
	if controlPlane {
		role = ControlPlaneTag
	}
	tags := slices.DeleteFunc(slices.Clone(user), Reserved)
	return append(tags, MachineTagPrefix+owner.UID, ClusterTagPrefix+owner.Cluster, NamespaceTagPrefix+owner.Namespace, role)
}

// Owner is the object a device or reservation must be proven to belong to
// before anything but a read is done with it.
type Owner struct {
	// Project is the Metal project the object must be in.
	Project string
	// UID is the PacketMachine's (or PacketCluster's) UID, its identifying
	// tag's value.
	UID string
	// Name is the PacketMachine's name, upstream's machine tag's value.
	Name      string
	Cluster   string
	Namespace string
	// Exists reports whether an object of the owner's kind with this UID
	// still exists in the owner's namespace. A device tagged with the UID
	// of a machine that is gone was moved (`clusterctl move` gives objects
	// new UIDs); one tagged with a live machine's UID is that machine's.
	Exists func(uid string) bool
}

// NotOwnedError: the object is not the owner's. Field and Value name what
// pointed at it.
type NotOwnedError struct {
	// Kind is "device" or "reservation"; ID is the object's.
	Kind, ID string
	// Why says what the object carries instead.
	Why string
}

func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("%s %s is not this object's: %s", e.Kind, e.ID, e.Why)
}

// Owned is the proof that a device or reservation is owner's, from its
// project and tags alone. uidPrefix is the identifying tag's prefix
// (MachineTagPrefix for devices, EndpointTagPrefix for reservations).
//   - In another project: not owned.
//   - Carrying the owner's identifying tag: owned.
//   - Carrying the cluster's and namespace's tags, and no identifying tag of
//     a live object: owned (moved with `clusterctl move`).
//   - For devices, carrying upstream CAPP's machine, cluster and namespace
//     tags of the owner: owned (adopted from upstream).
func Owned(kind, id, project string, tags []string, uidPrefix string, o Owner) error {
	notOwned := func(format string, args ...any) error {
		return &NotOwnedError{Kind: kind, ID: id, Why: fmt.Sprintf(format, args...)}
	}
	if project != o.Project {
		return notOwned("it is in project %s, not in project %s", project, o.Project)
	}
	if slices.Contains(tags, uidPrefix+o.UID) {
		return nil
	}
	if kind == "device" && hasAll(tags, upstreamMachineTagPrefix+o.Name, upstreamClusterTagPrefix+o.Cluster, upstreamNamespaceTagPrefix+o.Namespace) {
		return nil
	}
	if !hasAll(tags, ClusterTagPrefix+o.Cluster, NamespaceTagPrefix+o.Namespace) {
		return notOwned("it lacks the tag %s%s and the tags of cluster %s in namespace %s (it has %s)",
			uidPrefix, o.UID, o.Cluster, o.Namespace, describeTags(tags))
	}
	for _, t := range tags {
		if uid, ok := strings.CutPrefix(t, uidPrefix); ok && o.Exists != nil && o.Exists(uid) {
			return notOwned("it carries the tag %s of another object of namespace %s, which still exists", t, o.Namespace)
		}
	}
	return nil
}

func hasAll(tags []string, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(tags, w) {
			return false
		}
	}
	return true
}

func describeTags(tags []string) string {
	if len(tags) == 0 {
		return "no tags"
	}
	return "tags " + strings.Join(tags, ", ")
}
