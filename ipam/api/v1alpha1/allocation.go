package v1alpha1

// The allocation records: one coordination.k8s.io Lease per address in use,
// in the manager's namespace (--allocation-namespace), named after the
// allocation domain and the address. The labels let one label-selected List
// find the records of a domain or of a claim; the annotations carry the
// rest. The provider is their only writer.
const (
	// AllocationDomainLabel carries a hash of the allocation domain.
	AllocationDomainLabel = "ipam.cluster.x-k8s.io/metal-vrf-domain"
	// AllocationClaimUIDLabel carries the UID of the claim holding the address.
	AllocationClaimUIDLabel = "ipam.cluster.x-k8s.io/metal-vrf-claim-uid"
	// AllocationDomainAnnotation is the allocation domain.
	AllocationDomainAnnotation = "ipam.cluster.x-k8s.io/metal-vrf-domain"
	// AllocationAddressAnnotation is the address in use.
	AllocationAddressAnnotation = "ipam.cluster.x-k8s.io/metal-vrf-address"
	// AllocationPoolAnnotation is the pool, as "<kind>/[<namespace>/]<name>".
	AllocationPoolAnnotation = "ipam.cluster.x-k8s.io/metal-vrf-pool"
	// AllocationClaimAnnotation is the claim, as "<namespace>/<name>"; the
	// Lease's holderIdentity says the same, for kubectl.
	AllocationClaimAnnotation = "ipam.cluster.x-k8s.io/metal-vrf-claim"
)
