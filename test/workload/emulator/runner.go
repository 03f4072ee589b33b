package emulator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"sync"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	cloudv1 "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/cloud/api/v1alpha1"
	inmemoryruntime "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// Runner makes the platform's devices nodes of in-memory workload
// clusters, polling the Metal API as a fleet of booting devices would
// experience it: each active device whose user-data would join (Read,
// Admit) becomes a node of the management cluster's Cluster whose name
// and endpoint its control plane was initialised with; each cluster's API
// server answers at its endpoint while the platform routes the address to
// one of its control planes (see Loopback).
type Runner struct {
	Metal *metal.Client
	// SimURL is the simulator's base URL, for what a node tells the
	// platform outside the Metal API (see reportNetwork).
	SimURL string
	// Management is where a cluster's first control plane finds its
	// Cluster and the CAs the emulated API server and etcd serve with; it
	// is read for nothing else, so a cluster moved to another management
	// cluster keeps answering, and its new nodes join it.
	Management client.Reader
	Log        logr.Logger
	// Amend, when set, changes what the runner reads of each device before
	// it reads the user-data: a test's way to put a node in a state the
	// providers do not produce (e.g. a fault), or to add what they do not
	// produce yet.
	Amend func(Device) Device
	// Ignore, when set, names the devices the runner leaves alone: those
	// another runs as real machines (test/nodeagent).
	Ignore func(Device) bool

	manager  inmemoryruntime.Manager
	clusters map[types.NamespacedName]*workloadCluster
	// joined are the nodes that came up, by device.
	joined map[string]Node
	// reported are the devices whose network configuration was reported.
	reported map[string]bool

	mu       sync.Mutex
	refusals []error
}

// pollInterval is how often the runner reads the platform.
const pollInterval = time.Second

// Run polls until ctx ends, then takes every emulated cluster down and
// unbinds their endpoints.
func (r *Runner) Run(ctx context.Context) error {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{cloudv1.AddToScheme, corev1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	r.manager = inmemoryruntime.NewManager(scheme)
	if err := r.manager.Start(ctx); err != nil {
		return err
	}
	r.clusters, r.joined, r.reported = map[types.NamespacedName]*workloadCluster{}, map[string]Node{}, map[string]bool{}
	defer r.shutdown()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		if err := r.poll(ctx); err != nil && ctx.Err() == nil {
			r.Log.Error(err, "emulating the devices")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Refusals are the devices the last poll refused, as *Refusal errors.
func (r *Runner) Refusals() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.refusals)
}

func (r *Runner) poll(ctx context.Context) error {
	devices, err := r.Metal.ListDevices(ctx, metal.DeviceFilter{})
	if err != nil {
		return err
	}
	routes, err := r.routes(ctx)
	if err != nil {
		return err
	}
	var nodes []Node
	var refusals []error
	listed := map[string]bool{}
	for _, d := range devices {
		listed[d.GetId()] = true
		if d.GetState() != metalv1.DEVICESTATE_ACTIVE {
			continue
		}
		dev := Device{ID: d.GetId(), Hostname: d.GetHostname(), UserData: []byte(d.GetUserdata())}
		if r.Ignore != nil && r.Ignore(dev) {
			continue
		}
		if r.Amend != nil {
			dev = r.Amend(dev)
		}
		n, err := Read(dev)
		if err != nil {
			refusals = append(refusals, err)
			continue
		}
		nodes = append(nodes, n)
	}
	admitted, refused := Admit(nodes, routes, r.joined)
	refusals = append(refusals, refused...)

	var errs []error
	for id := range r.reported {
		if !listed[id] {
			delete(r.reported, id)
		}
	}
	for _, n := range nodes {
		if n.ConfiguresNetwork && !r.reported[n.DeviceID] {
			err := reportNetwork(ctx, r.SimURL, r.Metal.APIKey(), n.DeviceID)
			r.reported[n.DeviceID] = err == nil
			errs = append(errs, err)
		}
	}
	present := map[string]bool{}
	for _, n := range admitted {
		present[n.DeviceID] = true
		if _, ok := r.joined[n.DeviceID]; ok {
			continue
		}
		err := r.join(ctx, n)
		var refusal *Refusal
		switch {
		case errors.As(err, &refusal):
			refusals = append(refusals, err)
		case err != nil:
			errs = append(errs, err)
		default:
			r.Log.Info("node joined", "device", n.DeviceID, "node", n.Name, "role", n.Role, "cluster", n.ClusterName)
			r.joined[n.DeviceID] = n
		}
	}
	for id, n := range r.joined {
		if !present[id] {
			errs = append(errs, r.leave(ctx, n))
		}
	}
	for key, w := range r.clusters {
		errs = append(errs, r.expose(ctx, w, routes))
		if len(r.nodesOf(key)) == 0 {
			r.Log.Info("workload cluster gone", "cluster", key)
			errs = append(errs, r.unexpose(w), w.shutdown(ctx, r.manager))
			delete(r.clusters, key)
		}
	}
	for _, err := range refusals {
		r.Log.V(1).Info("device refused", "reason", err)
	}
	r.mu.Lock()
	r.refusals = refusals
	r.mu.Unlock()
	return errors.Join(errs...)
}

// routes reads where the platform routes each reserved public address.
func (r *Runner) routes(ctx context.Context) (Routes, error) {
	reservations, err := r.Metal.ListPublicIPv4Reservations(ctx, "")
	if err != nil {
		return nil, err
	}
	routes := Routes{}
	for _, res := range reservations {
		addr, err := netip.ParseAddr(res.GetAddress())
		if err != nil {
			return nil, fmt.Errorf("reservation %s: %w", res.GetId(), err)
		}
		routes[addr] = ""
		for _, a := range res.GetAssignments() {
			routes[addr] = path.Base(a.AssignedTo.GetHref())
		}
	}
	return routes, nil
}

// join registers the admitted node n in its workload cluster, creating the
// cluster for its first control plane. Only that one reads the management
// cluster (the Cluster's key and CAs): a joining node, as a real one,
// joins whatever answers at its endpoint, wherever its Cluster is managed
// from since (clusterctl move).
func (r *Runner) join(ctx context.Context, n Node) error {
	w := r.answering(n)
	if w == nil {
		if n.Role != FirstControlPlane {
			return refuse(n.DeviceID, EndpointUnreachable, "no emulated cluster %s answers at %s", n.ClusterName, n.Endpoint)
		}
		key, err := r.clusterOf(ctx, n)
		if err != nil {
			return err
		}
		if w, err = newWorkloadCluster(ctx, r.Management, r.manager, key, n.Endpoint, n.KubernetesVersion); err != nil {
			return err
		}
		r.clusters[key] = w
	}
	if len(n.CACertHashes) > 0 && !slices.Contains(n.CACertHashes, w.ca.hash()) {
		return refuse(n.DeviceID, CAMismatch, "it pins %v, cluster %s's CA is %s", n.CACertHashes, w.key, w.ca.hash())
	}
	return w.addNode(ctx, n)
}

// answering is the emulated cluster of n's name at n's endpoint, or nil.
func (r *Runner) answering(n Node) *workloadCluster {
	for _, w := range r.clusters {
		if w.key.Name == n.ClusterName && w.endpoint == n.Endpoint {
			return w
		}
	}
	return nil
}

// clusterOf finds the management cluster's Cluster the node belongs to:
// the one with the node's cluster name whose control plane endpoint is the
// node's endpoint.
func (r *Runner) clusterOf(ctx context.Context, n Node) (types.NamespacedName, error) {
	clusters := &clusterv1.ClusterList{}
	if err := r.Management.List(ctx, clusters); err != nil {
		return types.NamespacedName{}, err
	}
	for _, c := range clusters.Items {
		ep := c.Spec.ControlPlaneEndpoint
		if c.Name == n.ClusterName && ep.Host == n.Endpoint.Addr().String() && ep.Port == int32(n.Endpoint.Port()) {
			return client.ObjectKeyFromObject(&c), nil
		}
	}
	return types.NamespacedName{}, fmt.Errorf("device %s: no Cluster %s with the endpoint %s in the management cluster", n.DeviceID, n.ClusterName, n.Endpoint)
}

// nodesOf are the joined nodes of the cluster key.
func (r *Runner) nodesOf(key types.NamespacedName) []Node {
	var nodes []Node
	for _, n := range r.joined {
		if w := r.clusters[key]; w != nil && n.ClusterName == key.Name && n.Endpoint == w.endpoint {
			nodes = append(nodes, n)
		}
	}
	return nodes
}

// leave removes the node of a device that is gone or no longer active.
func (r *Runner) leave(ctx context.Context, n Node) error {
	delete(r.joined, n.DeviceID)
	r.Log.Info("node left", "device", n.DeviceID, "node", n.Name, "cluster", n.ClusterName)
	if w := r.answering(n); w != nil {
		return w.removeNode(ctx, n)
	}
	return nil
}

// expose binds the cluster's endpoint to lo while the platform routes it
// to one of the cluster's control planes (which bind it: Admit checked),
// serves their API servers there, and unbinds it otherwise.
func (r *Runner) expose(ctx context.Context, w *workloadCluster, routes Routes) error {
	target := r.joined[routes[w.endpoint.Addr()]]
	if !target.Role.IsControlPlane() || target.Binds != w.endpoint.Addr() || target.ClusterName != w.key.Name {
		return r.unexpose(w)
	}
	if !w.exposed {
		if err := (Loopback{}).Bind(w.endpoint.Addr()); err != nil {
			return err
		}
		w.exposed = true
		r.Log.Info("endpoint routed to a control plane that binds it: answering", "cluster", w.key, "endpoint", w.endpoint, "device", target.DeviceID)
	}
	var errs []error
	for _, n := range r.nodesOf(w.key) {
		if n.Role.IsControlPlane() {
			errs = append(errs, w.serveAPI(n.Name))
		}
	}
	errs = append(errs, w.initialiseNodes(ctx))
	return errors.Join(errs...)
}

func (r *Runner) unexpose(w *workloadCluster) error {
	if !w.exposed {
		return nil
	}
	r.Log.Info("endpoint not routed to a control plane that binds it: unreachable", "cluster", w.key, "endpoint", w.endpoint)
	w.exposed = false
	return Loopback{}.Unbind(w.endpoint.Addr())
}

// shutdown takes every emulated cluster down.
func (r *Runner) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for key, w := range r.clusters {
		if err := errors.Join(r.unexpose(w), w.shutdown(ctx, r.manager)); err != nil {
			r.Log.Error(err, "taking the workload cluster down", "cluster", key)
		}
	}
}
