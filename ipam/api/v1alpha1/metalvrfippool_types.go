package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// MetalVRFIPPoolKind is the kind an IPAddressClaim names to draw from a namespaced pool.
	MetalVRFIPPoolKind = "MetalVRFIPPool"
	// GlobalMetalVRFIPPoolKind is the kind an IPAddressClaim names to draw from a cluster-scoped pool.
	GlobalMetalVRFIPPoolKind = "GlobalMetalVRFIPPool"

	// ProtectPoolFinalizer keeps a pool, and the record of what it handed out,
	// until no IPAddress of the pool is left.
	ProtectPoolFinalizer = "metal-vrf.ipam.cluster.x-k8s.io/protect-pool"

	// RequestedAddressAnnotation on an IPAddressClaim asks for one specific
	// address of the pool instead of the lowest free one. A claim whose
	// address is taken, reserved or outside the pool says so in its Ready
	// condition and is served once the address is released.
	RequestedAddressAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/requested-address"

	// SkipDeleteValidationAnnotation lets a pool with addresses in use be deleted.
	// It carries the in-cluster provider's name so tooling written for that
	// provider keeps working. clusterctl move sets its own delete-for-move
	// annotation, which is honoured as well.
	SkipDeleteValidationAnnotation = "ipam.cluster.x-k8s.io/skip-validate-delete-webhook"
)

// Condition types and reasons of a pool.
const (
	// ReadyCondition is True when the pool's address space resolved and
	// claims can be served from it.
	ReadyCondition = "Ready"

	// ReadyReason means the pool resolved and serves claims.
	ReadyReason = "Ready"
	// InvalidSpecReason means the pool's spec cannot be turned into an address
	// space; the message names the field and the value.
	InvalidSpecReason = "InvalidSpec"
	// ExhaustedReason means every address of the pool is in use.
	ExhaustedReason = "Exhausted"
)

// MetalVRFIPPoolSpec is the address space of a pool and how its addresses are
// handed out.
//
// Addresses are the only source today. Equinix Metal VRF ranges and
// PacketCluster networks will join them as further optional sources, unioned
// with these, which is why addresses and prefix are optional in the schema
// and required together by a rule.
//
// +kubebuilder:validation:XValidation:rule="has(self.addresses) && size(self.addresses) > 0",message="spec.addresses: at least one address source is required"
// +kubebuilder:validation:XValidation:rule="!has(self.addresses) || has(self.prefix)",message="spec.prefix: required when spec.addresses is set"
type MetalVRFIPPoolSpec struct {
	// Addresses that may be handed out: CIDRs ("10.0.0.0/24"), inclusive
	// ranges ("10.0.0.10-10.0.0.50") or single addresses, all of one IP
	// family, all inside the subnet given by prefix, not overlapping.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=100
	Addresses []string `json:"addresses,omitempty"`

	// Prefix is the length of the subnet the addresses sit in; it is handed
	// out with each address. At most 32 for IPv4 and 128 for IPv6.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=128
	Prefix *int32 `json:"prefix,omitempty"`

	// Gateway of the subnet, handed out with each address and never
	// allocated itself. It must lie inside the subnet.
	// +optional
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	Gateway string `json:"gateway,omitempty"`

	// ExcludedAddresses are never handed out: CIDRs, ranges or single
	// addresses of the pool's family.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=100
	ExcludedAddresses []string `json:"excludedAddresses,omitempty"`

	// AllocateReservedIPAddresses lets the subnet's network and broadcast
	// addresses (IPv4) or its subnet-router anycast address (IPv6) be handed
	// out. They are skipped by default.
	// +optional
	AllocateReservedIPAddresses bool `json:"allocateReservedIPAddresses,omitempty"`

	// AddressReuseGracePeriodSeconds keeps a released address out of use for
	// this long after its claim was deleted, so ARP caches and switches forget
	// the old holder before a new machine gets the address. The claim's
	// deletion waits out the period (skipped when the pool itself is being
	// deleted), which keeps the hold across restarts. 0 or unset: reuse at once.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	AddressReuseGracePeriodSeconds *int32 `json:"addressReuseGracePeriodSeconds,omitempty"`
}

// IPAddressesSummary counts a pool's addresses.
//
// Total and Free count address space, which for an IPv6 pool can exceed any
// integer type a client may decode into, so they are exact decimal strings.
// Used and OutOfRange count IPAddress objects and always fit an int64.
type IPAddressesSummary struct {
	// Total is the number of addresses the pool can hand out, as a decimal string.
	Total string `json:"total"`
	// Free is the number of addresses not in use, as a decimal string.
	Free string `json:"free"`
	// Used is the number of IPAddresses allocated from the pool.
	Used int64 `json:"used"`
	// OutOfRange is the number of IPAddresses of the pool whose address is no
	// longer part of its address space (after a spec change); they stay
	// allocated until their claims are released.
	OutOfRange int64 `json:"outOfRange"`
}

// MetalVRFIPPoolStatus is what the pool reconciler observed.
type MetalVRFIPPoolStatus struct {
	// Conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// IPAddresses counts the pool's addresses.
	// +optional
	IPAddresses *IPAddressesSummary `json:"ipAddresses,omitempty"`

	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// MetalVRFIPPool hands out addresses to IPAddressClaims of its namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=metalvrfippools,scope=Namespaced,categories=cluster-api,shortName=mvip
// +kubebuilder:printcolumn:name="Addresses",type="string",JSONPath=".spec.addresses",description="Address entries of the pool"
// +kubebuilder:printcolumn:name="Total",type="string",JSONPath=".status.ipAddresses.total",description="Addresses the pool can hand out"
// +kubebuilder:printcolumn:name="Free",type="string",JSONPath=".status.ipAddresses.free",description="Addresses not in use"
// +kubebuilder:printcolumn:name="Used",type="integer",JSONPath=".status.ipAddresses.used",description="Addresses in use"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type MetalVRFIPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MetalVRFIPPoolSpec   `json:"spec,omitempty"`
	Status MetalVRFIPPoolStatus `json:"status,omitempty"`
}

// MetalVRFIPPoolList is a list of MetalVRFIPPools.
//
// +kubebuilder:object:root=true
type MetalVRFIPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MetalVRFIPPool `json:"items"`
}

// GlobalMetalVRFIPPool hands out addresses to IPAddressClaims of every namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=globalmetalvrfippools,scope=Cluster,categories=cluster-api,shortName=gmvip
// +kubebuilder:printcolumn:name="Addresses",type="string",JSONPath=".spec.addresses",description="Address entries of the pool"
// +kubebuilder:printcolumn:name="Total",type="string",JSONPath=".status.ipAddresses.total",description="Addresses the pool can hand out"
// +kubebuilder:printcolumn:name="Free",type="string",JSONPath=".status.ipAddresses.free",description="Addresses not in use"
// +kubebuilder:printcolumn:name="Used",type="integer",JSONPath=".status.ipAddresses.used",description="Addresses in use"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type GlobalMetalVRFIPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MetalVRFIPPoolSpec   `json:"spec,omitempty"`
	Status MetalVRFIPPoolStatus `json:"status,omitempty"`
}

// GlobalMetalVRFIPPoolList is a list of GlobalMetalVRFIPPools.
//
// +kubebuilder:object:root=true
type GlobalMetalVRFIPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GlobalMetalVRFIPPool `json:"items"`
}
