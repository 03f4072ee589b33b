package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MetalVRFIPAllocationKind is the kind of the record of one address in use.
const MetalVRFIPAllocationKind = "MetalVRFIPAllocation"

// Labels of a MetalVRFIPAllocation, so that the provider finds the records
// of a domain, and those of a claim, with one label-selected List.
const (
	// AllocationDomainLabel carries the hash of the allocation domain.
	AllocationDomainLabel = "ipam.cluster.x-k8s.io/metal-vrf-domain"
	// AllocationClaimUIDLabel carries the UID of the claim holding the address.
	AllocationClaimUIDLabel = "ipam.cluster.x-k8s.io/metal-vrf-claim-uid"
)

// AllocationClaimReference names the claim an address was handed out to.
type AllocationClaimReference struct {
	// Namespace of the claim.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// Name of the claim.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// UID of the claim: a claim deleted and created again under the same
	// name is another claim.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid"`
}

// AllocationPoolReference names the pool an address was handed out from.
type AllocationPoolReference struct {
	// Kind is MetalVRFIPPool or GlobalMetalVRFIPPool.
	// +kubebuilder:validation:Enum=MetalVRFIPPool;GlobalMetalVRFIPPool
	Kind string `json:"kind"`
	// Namespace of a MetalVRFIPPool; empty for a GlobalMetalVRFIPPool.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// Name of the pool.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// MetalVRFIPAllocationSpec says which claim holds which address of which
// allocation domain. It never changes: an address changes hands by deleting
// its record and creating another.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a MetalVRFIPAllocation is immutable"
type MetalVRFIPAllocationSpec struct {
	// Domain is the allocation domain: "vrf/<project>/<vrf>" for VRF pools,
	// "pool/<kind>/[<namespace>/]<name>" for any other pool.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Domain string `json:"domain"`
	// Address is the address in use.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=39
	Address string `json:"address"`
	// Pool the address was handed out from.
	Pool AllocationPoolReference `json:"pool"`
	// Claim holding the address.
	Claim AllocationClaimReference `json:"claim"`
}

// MetalVRFIPAllocation records that one address of an allocation domain is
// in use. Its name is derived from the domain and the address, so the API
// server refuses a second record of the same address: whatever replica or
// stale process tries to hand the address out again gets AlreadyExists. The
// provider writes it before the claim's IPAddress and deletes it after the
// IPAddress is gone; nobody else should.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=metalvrfipallocations,scope=Cluster,categories=cluster-api,shortName=mvipa
// +kubebuilder:printcolumn:name="Address",type="string",JSONPath=".spec.address"
// +kubebuilder:printcolumn:name="Claim-Namespace",type="string",JSONPath=".spec.claim.namespace"
// +kubebuilder:printcolumn:name="Claim",type="string",JSONPath=".spec.claim.name"
// +kubebuilder:printcolumn:name="Domain",type="string",JSONPath=".spec.domain",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type MetalVRFIPAllocation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec MetalVRFIPAllocationSpec `json:"spec"`
}

// MetalVRFIPAllocationList is a list of MetalVRFIPAllocations.
//
// +kubebuilder:object:root=true
type MetalVRFIPAllocationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MetalVRFIPAllocation `json:"items"`
}
