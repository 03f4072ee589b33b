package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// AssignmentType names the component that hands out a network's addresses.
//
// +kubebuilder:validation:Enum=cluster-api;dhcp
type AssignmentType string

const (
	// AssignmentClusterAPI means Cluster API hands out the addresses, through
	// an IPAM pool.
	AssignmentClusterAPI AssignmentType = "cluster-api"
	// AssignmentDHCP means a DHCP server on the network hands them out.
	AssignmentDHCP AssignmentType = "dhcp"
)

// NetworkSpec is a network the cluster's machines can be attached to.
//
// +kubebuilder:validation:XValidation:rule="!has(self.assignment) || self.assignment != 'cluster-api' || (has(self.name) && size(self.name) > 0)",fieldPath=".name",message="is required with assignment cluster-api: a pool names the network in its spec.networkRef.network"
// +kubebuilder:validation:XValidation:rule="!has(self.ipAddresses) || self.ipAddresses.all(a, !isCIDR(a) || !isCIDR(self.ipAddresses[0]) || cidr(a).ip().family() == cidr(self.ipAddresses[0]).ip().family())",fieldPath=".ipAddresses",messageExpression="'mixes IP families: %s is not of the family of %s; a network holds one family, so give the other its own network'.format([self.ipAddresses.filter(a, isCIDR(a) && isCIDR(self.ipAddresses[0]) && cidr(a).ip().family() != cidr(self.ipAddresses[0]).ip().family())[0], self.ipAddresses[0]])"
type NetworkSpec struct {
	// Name of the network, e.g. "storage VLAN".
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// Description of the network, e.g. "Storage network for VMs".
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`

	// IPAddresses are the address ranges of the network, e.g. the ranges of
	// an Equinix Metal VRF: CIDRs without host bits, all of one IP family.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",messageExpression="'%s is not a CIDR: write a network such as 10.60.0.0/16'.format([self])"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",messageExpression="'%s has host bits set: write the network %s'.format([self, string(cidr(self).masked())])"
	IPAddresses []string `json:"ipAddresses,omitempty"`

	// Assignment is the component that hands out the network's addresses to
	// machines.
	// +optional
	Assignment AssignmentType `json:"assignment,omitempty"`
}

// ClusterFinalizer lets the PacketCluster reconciler release the cluster's
// endpoint reservation before the PacketCluster goes.
const ClusterFinalizer = "packetcluster.infrastructure.cluster.x-k8s.io"

// EndpointReservationAnnotation is set on a PacketCluster whose
// control-plane endpoint the provider reserves (vipManager CPEM without a
// host): before the reservation is requested it holds
// EndpointReservationPending, then the reservation's ID. It is written with
// the spec, so whether a reservation may exist survives a lost status write,
// and its absence means deleting the PacketCluster releases nothing.
const EndpointReservationAnnotation = "infrastructure.cluster.x-k8s.io/endpoint-reservation"

// EndpointReservationPending is the value of EndpointReservationAnnotation
// while the reservation's ID is not known yet.
const EndpointReservationPending = "pending"

// VIPClaimProtectionFinalizer keeps the IPAddressClaim of a cluster's
// control-plane VIP, and so its address, while the control-plane nodes may
// still announce it. Only the PacketCluster reconciler removes it, when the
// PacketCluster is deleted (CAPI deletes it after the cluster's machines).
const VIPClaimProtectionFinalizer = "packetcluster.infrastructure.cluster.x-k8s.io/vip-claim-protection"

// ControlPlaneVIP is a control-plane endpoint claimed from an IPAM pool and
// announced by kube-vip, in ARP mode, on the control-plane nodes' VLAN
// sub-interface of the network with vxlan.
type ControlPlaneVIP struct {
	// AddressFromPool is the IPAM pool (any kind: InClusterIPPool,
	// GlobalInClusterIPPool, VRFIPPool, ...) the VIP is claimed from. It
	// should be a pool of the VLAN's subnet that the machines' own addresses
	// are not taken from, or one that leaves the VIP out of theirs.
	// +required
	// +kubebuilder:validation:XValidation:rule="has(self.apiGroup) && self.apiGroup != ''",message="apiGroup is required, e.g. ipam.cluster.x-k8s.io"
	// +kubebuilder:validation:XValidation:rule="self.kind != ''",fieldPath=".kind",message="is required: the kind of the pool, e.g. InClusterIPPool"
	// +kubebuilder:validation:XValidation:rule="self.name != ''",fieldPath=".name",message="is required: the name of the pool"
	AddressFromPool corev1.TypedLocalObjectReference `json:"addressFromPool"`

	// VXLAN is the VLAN whose sub-interface serves the VIP: every
	// control-plane machine needs a network with this vxlan.
	// +required
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=3999
	VXLAN int32 `json:"vxlan"`
}

// VIPManager names what serves a cluster's control-plane endpoint.
type VIPManager string

// The VIP managers upstream CAPP knows.
const (
	VIPManagerCPEM    VIPManager = "CPEM"
	VIPManagerKubeVIP VIPManager = "KUBE_VIP"
	VIPManagerEMLB    VIPManager = "EMLB"
)

// FailureDomainSpec is a place the cluster's machines can be put in: a
// facility of the cluster's metro, or a whole metro. Its name, what a
// Machine's spec.failureDomain gives, is the facility's or the metro's code.
//
// +kubebuilder:validation:XValidation:rule="has(self.facility) != has(self.metro)",message="exactly one of facility or metro must be set"
type FailureDomainSpec struct {
	// Facility of the cluster's metro (spec.metro), e.g. "da11": the
	// metro's code followed by a number.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z]{2}[0-9]+$')",messageExpression="'%s is not a facility code: a metro code and a number, e.g. da11'.format([self])"
	Facility string `json:"facility,omitempty"`

	// Metro, e.g. "sv": only for a cluster without VLANs (spec.networks
	// and spec.vip empty), since a VLAN exists in one metro only.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z]{2}$')",messageExpression="'%s is not a metro code: two lower-case letters, e.g. da'.format([self])"
	Metro string `json:"metro,omitempty"`

	// ControlPlane says whether control-plane machines may be placed here
	// (KubeadmControlPlane spreads them over such failure domains).
	// +optional
	// +kubebuilder:default=true
	ControlPlane *bool `json:"controlPlane,omitempty"`
}

// Name is the failure domain's name: its facility's or its metro's code.
func (f FailureDomainSpec) Name() string {
	if f.Facility != "" {
		return f.Facility
	}
	return f.Metro
}

// PacketClusterSpec is the Equinix Metal side of a Cluster.
//
// +kubebuilder:validation:XValidation:rule="!has(self.failureDomains) || self.failureDomains.all(f, !has(f.facility) || has(self.metro) && f.facility.startsWith(self.metro))",fieldPath=".failureDomains",messageExpression="has(self.metro) ? 'facility %s is not in spec.metro %s: list facilities of the metro of the cluster, whose codes start with it'.format([self.failureDomains.filter(f, has(f.facility) && !f.facility.startsWith(self.metro))[0].facility, self.metro]) : 'facility %s needs spec.metro: facility failure domains are facilities of the metro of the cluster'.format([self.failureDomains.filter(f, has(f.facility))[0].facility])"
// +kubebuilder:validation:XValidation:rule="!has(self.failureDomains) || !self.failureDomains.exists(f, has(f.metro)) || (!has(self.networks) || size(self.networks) == 0) && !has(self.vip)",fieldPath=".failureDomains",messageExpression="'metro %s: metro failure domains need a cluster without VLANs (spec.networks and spec.vip empty), since a VLAN exists in one metro only; list facilities of spec.metro instead'.format([self.failureDomains.filter(f, has(f.metro))[0].metro])"
// +kubebuilder:validation:XValidation:rule="!has(self.failureDomains) || size(self.failureDomains) == 0 || !has(self.facility) || size(self.facility) == 0",fieldPath=".facility",messageExpression="'is %s, but spec.failureDomains places the machines: leave spec.facility empty, or list it as a failure domain'.format([self.facility])"
// +kubebuilder:validation:XValidation:rule="!has(self.vip) || self.vipManager == 'KUBE_VIP'",fieldPath=".vipManager",messageExpression="'is %s, but vip needs vipManager KUBE_VIP: kube-vip announces it'.format([self.vipManager])"
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || !has(self.vip) || !has(self.controlPlaneEndpoint) || !has(self.controlPlaneEndpoint.host) || size(self.controlPlaneEndpoint.host) == 0",optionalOldSelf=true,message="controlPlaneEndpoint.host must be empty with vip: the VIP claimed from the pool fills it"
// +kubebuilder:validation:XValidation:rule="!oldSelf.hasValue() || has(self.vip) == has(oldSelf.value().vip) && (!has(self.vip) || self.vip == oldSelf.value().vip)",optionalOldSelf=true,message="vip is immutable: the cluster's endpoint cannot move"
type PacketClusterSpec struct {
	// ProjectID is the Equinix Metal project the cluster's devices live in.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	ProjectID string `json:"projectID"`

	// CredentialsRef names a Secret in the PacketCluster's namespace holding
	// the Metal API credentials of the cluster's devices: apiKey (required)
	// and baseURL (optional). Without it the provider uses its own
	// environment (METAL_API_KEY or PACKET_API_KEY, and METAL_API_URL).
	// +optional
	CredentialsRef *corev1.LocalObjectReference `json:"credentialsRef,omitempty"`

	// Metro is the Equinix Metal metro of the cluster, e.g. "ny".
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Metro string `json:"metro,omitempty"`

	// Facility is the Equinix Metal facility of the cluster, e.g. "ny5".
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Facility string `json:"facility,omitempty"`

	// ControlPlaneEndpoint is the endpoint the cluster's API server is reached at.
	// +optional
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`

	// VIPManager is what serves the control-plane endpoint: CPEM (the
	// Equinix Metal cloud provider announces a reserved public address),
	// KUBE_VIP, or EMLB. Upstream CAPP's field and default.
	// +optional
	// +kubebuilder:validation:Enum=CPEM;KUBE_VIP;EMLB
	// +kubebuilder:default=CPEM
	VIPManager VIPManager `json:"vipManager,omitempty"`

	// Networks the cluster's machines can be attached to. Their names are
	// unique, and no two of their ipAddresses overlap: a pool that draws
	// from one network would otherwise hand out another's addresses.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(n, !has(n.name) || self.filter(m, has(m.name) && m.name == n.name).size() == 1)",messageExpression="'network names must be unique: %s names more than one network'.format([self.filter(n, has(n.name) && self.filter(m, has(m.name) && m.name == n.name).size() > 1)[0].name])"
	// +kubebuilder:validation:XValidation:rule="self.all(n, !has(n.ipAddresses) || n.ipAddresses.all(a, !isCIDR(a) || self.map(m, has(m.ipAddresses) ? m.ipAddresses.filter(b, isCIDR(b) && cidr(b).containsIP(cidr(a).ip())).size() : 0).sum() == 1))",messageExpression="'ipAddresses overlap: %s lies inside another entry; each address belongs to one network'.format([self.map(n, has(n.ipAddresses) ? n.ipAddresses.filter(a, isCIDR(a) && self.map(m, has(m.ipAddresses) ? m.ipAddresses.filter(b, isCIDR(b) && cidr(b).containsIP(cidr(a).ip())).size() : 0).sum() > 1) : []).filter(l, l.size() > 0)[0][0]])"
	Networks []NetworkSpec `json:"networks,omitempty"`

	// FailureDomains are where the cluster's machines can be placed, published
	// in status.failureDomains: facilities of spec.metro, or metros (for a
	// cluster without VLANs). A Machine's spec.failureDomain names one by
	// its code. Empty: the one failure domain is spec.facility, else
	// spec.metro.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(f, self.filter(g, (has(g.facility) ? g.facility : g.metro) == (has(f.facility) ? f.facility : f.metro)).size() == 1)",messageExpression="'%s is listed more than once: a failure domain is named by its facility or metro'.format([self.filter(f, self.filter(g, (has(g.facility) ? g.facility : g.metro) == (has(f.facility) ? f.facility : f.metro)).size() > 1).map(f, (has(f.facility) ? f.facility : f.metro))[0]])"
	// +kubebuilder:validation:XValidation:rule="self.all(f, has(f.facility)) || self.all(f, has(f.metro))",messageExpression="'mixes facilities and metros (metro %s): list facilities of spec.metro, or metros, not both'.format([self.filter(f, has(f.metro))[0].metro])"
	FailureDomains []FailureDomainSpec `json:"failureDomains,omitempty"`

	// VIP is the control-plane endpoint claimed from an IPAM pool, with
	// vipManager KUBE_VIP: the PacketCluster owns the claim, sets
	// controlPlaneEndpoint to its address, and the control-plane machines'
	// user-data runs kube-vip to announce it. Released when the PacketCluster
	// is deleted.
	// +optional
	VIP *ControlPlaneVIP `json:"vip,omitempty"`
}

// PacketClusterInitializationStatus reports the CAPI provisioning contract.
// +kubebuilder:validation:MinProperties=1
type PacketClusterInitializationStatus struct {
	// Provisioned is true once the cluster's control-plane endpoint is set:
	// CAPI then copies it, and the failure domains, to the Cluster.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// PacketClusterStatus is what the PacketCluster reconciler observed.
type PacketClusterStatus struct {
	// Initialization reports the CAPI provisioning contract.
	// +optional
	Initialization PacketClusterInitializationStatus `json:"initialization,omitempty,omitzero"`

	// FailureDomains are where the cluster's machines can be placed:
	// spec.failureDomains, or else the cluster's facility, or else its
	// metro. CAPI copies them to the Cluster.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []clusterv1.FailureDomain `json:"failureDomains,omitempty"`

	// VIP is the control-plane VIP bound to the cluster's claim (spec.vip),
	// once it is valid: what the control-plane machines' kube-vip announces.
	// +optional
	// +kubebuilder:validation:MaxLength=39
	VIP string `json:"vip,omitempty"`

	// Conditions of the PacketCluster.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// PacketCluster is the Equinix Metal infrastructure of a Cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1beta1"
// +kubebuilder:resource:path=packetclusters,scope=Namespaced,categories=cluster-api,shortName=pcl
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster the PacketCluster belongs to"
// +kubebuilder:printcolumn:name="Metro",type="string",JSONPath=".spec.metro"
// +kubebuilder:printcolumn:name="Endpoint",type="string",JSONPath=".spec.controlPlaneEndpoint.host"
// +kubebuilder:printcolumn:name="VIP",type="string",JSONPath=".status.vip",description="Control-plane VIP claimed from spec.vip's pool"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type PacketCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PacketClusterSpec   `json:"spec,omitempty"`
	Status PacketClusterStatus `json:"status,omitempty"`
}

// PacketClusterList is a list of PacketClusters.
//
// +kubebuilder:object:root=true
type PacketClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PacketCluster `json:"items"`
}

// GetConditions returns the cluster's conditions (CAPI's conditions.Getter).
func (c *PacketCluster) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions replaces the cluster's conditions (CAPI's conditions.Setter).
func (c *PacketCluster) SetConditions(conditions []metav1.Condition) {
	c.Status.Conditions = conditions
}

func init() {
	objectTypes = append(objectTypes, &PacketCluster{}, &PacketClusterList{})
}
