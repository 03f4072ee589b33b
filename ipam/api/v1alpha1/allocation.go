package v1alpha1

// The allocation records: one coordination.k8s.io Lease per address in use,
// in the manager's namespace (--allocation-namespace), named after the
// allocation domain and the address. The labels let one label-selected List
// find the records of a domain or of a claim; the annotations carry the
// rest. The provider is their only writer.
const (
	// AllocationDomainLabel carries a hash of the allocation domain.
	AllocationDomainLabel = "ipam.cluster.x-k8s.io/metal-vrf-domain"
	// AllocationClaimUIDLabel carries a hash of the UID of the claim holding
	// the address (a UID in an owner reference need not be a label value).
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
	// AllocationPrefixLengthAnnotation, on the record of a prefix pool's
	// claim, is the length of the prefix held, whose first address is
	// AllocationAddressAnnotation: every address of it is in use.
	AllocationPrefixLengthAnnotation = "ipam.cluster.x-k8s.io/metal-vrf-prefix-length"
	// AllocationRecordedByAnnotation names the process that created the
	// record (its leader election identity): which replica allocated.
	AllocationRecordedByAnnotation = "ipam.cluster.x-k8s.io/metal-vrf-recorded-by"
)

// The marker of an allocation domain of a VRF: one coordination.k8s.io
// Lease beside its records, named "<domain hash>.spans", that says which
// span length the domain's records have, in AllocationSpansAnnotation: "0"
// (addresses), a prefix length, or "mixed" once writers of two lengths have
// marked it (see docs/pools.md, "Address and prefix pools of one VRF never
// overlap"). It carries AllocationDomainAnnotation, and AllocationMarkerLabel
// instead of AllocationDomainLabel: it is no record.
const (
	// AllocationMarkerLabel carries the hash of the domain on its marker.
	AllocationMarkerLabel = "ipam.cluster.x-k8s.io/metal-vrf-marker"
	// AllocationSpansAnnotation is what the marker says.
	AllocationSpansAnnotation = "ipam.cluster.x-k8s.io/metal-vrf-spans"
)

// The allocation fence (config/ipam/fence): a record that the controllers
// of a leader create carries AllocationFencedLabel and names in
// AllocationFenceAnnotation the leader election Lease its writer leads by;
// the replicas' Leases carry LeaderElectionLabel. The API server refuses
// such a record unless that Lease names its writer
// (AllocationRecordedByAnnotation) as holder: a leader deposed while it was
// frozen records nothing when it wakes.
const (
	// AllocationFencedLabel ("true") marks a record the API server fences.
	AllocationFencedLabel = "ipam.cluster.x-k8s.io/metal-vrf-fenced"
	// AllocationFenceAnnotation names the leader election Lease, in the
	// record's namespace, whose holder alone may create the record.
	AllocationFenceAnnotation = "ipam.cluster.x-k8s.io/metal-vrf-fence"
	// LeaderElectionLabel ("true") marks the Leases the manager's replicas
	// compete for: the fence's parameters.
	LeaderElectionLabel = "ipam.cluster.x-k8s.io/metal-vrf-leader-election"
)

// AllocationRetiredLabel marks the record of an address whose claim
// clusterctl move took with its Cluster (move copies a global pool's
// IPAddresses and deletes their claims and Cluster): the address lives on
// in another management cluster, so the record keeps it out of use here
// until the pool is deleted.
const AllocationRetiredLabel = "ipam.cluster.x-k8s.io/metal-vrf-retired"

// AllocationClaimUIDAnnotation is the UID of the claim holding the
// address; a retired record keeps it without AllocationClaimUIDLabel.
const AllocationClaimUIDAnnotation = "ipam.cluster.x-k8s.io/metal-vrf-claim-uid"

// A GlobalMetalVRFIPPool hands out addresses in one management cluster
// only: clusterctl move copies it to the target and leaves it on the
// source, and two copies allocating on their own would hand out the same
// addresses. See docs/install.md, "Moving a cluster".
const (
	// AllocatingClusterAnnotation names the management cluster that hands
	// out the pool's addresses (the UID of its kube-system namespace). The
	// manager sets it on a pool that has none.
	AllocatingClusterAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/allocating-cluster"
	// HandOverAnnotation, set by a user on the allocating cluster's copy,
	// asks it to stop allocating once no claim of this cluster holds an
	// address of the pool.
	HandOverAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/hand-over"
	// MovedAnnotation marks an IPAddress of a global pool whose claim
	// clusterctl move took: the claim carried clusterctl's delete-for-move
	// annotation and was deleted by a user with AssignVerb on the pool. Its
	// value is the claim's UID. Once the IPAddress's Cluster is gone too,
	// the address is retired here, never freed: the target management
	// cluster holds it. The manager writes it (the claim's validating
	// webhook, as the claim is deleted); anyone else needs AssignVerb.
	MovedAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/moved"
	// HandoverHashAnnotation is the SHA-256 (hex) of the pool's hand-over
	// token. The allocating cluster stamps it with AllocatingClusterAnnotation,
	// before any copy is made, and keeps the token in a Secret of its own
	// (HandoverTokenKey); a copy takes over only with the token of its hash.
	HandoverHashAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/handover-hash"
	// HandoverTokenAnnotation is written by the manager when it has handed
	// the pool over: it names the Secret (namespace/name) holding the token
	// under HandoverTokenKey. From then on this copy hands out nothing.
	HandoverTokenAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/handover-token"
	// TakeOverAnnotation, set by a user on another cluster's copy to the
	// token of the hand-over, makes that cluster the allocating one.
	TakeOverAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/take-over"
	// HandoverTokenKey is the key of the token in its Secret.
	HandoverTokenKey = "token"
	// AllocatedInAnnotation, on an IPAddress of a GlobalMetalVRFIPPool,
	// names the management cluster that handed its address out (the pool's
	// AllocatingClusterAnnotation then). clusterctl move and a restore copy
	// it: it is how a copy of the pool learns which cluster allocates when
	// its own annotation is missing (a copy re-created from Git) or names
	// another (a copy that existed on the target before the move). See
	// docs/reliability.md, "One allocating copy of a global pool".
	AllocatedInAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/allocated-in"
)

// AssignVerb is the verb on a pool (metalvrfippools, globalmetalvrfippools)
// that lets a user create IPAddresses of the pool by hand, without a claim
// being served: what clusterctl move and a restore do. Like RBAC's own bind
// and escalate, no Role grants it unless it names it (or "*"): the IPAM
// manager, and administrators, have it; a tenant that edits claims and
// IPAddresses in its namespace does not.
const AssignVerb = "assign"
