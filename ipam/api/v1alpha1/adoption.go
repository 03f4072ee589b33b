package v1alpha1

// Adoption of the reference in-cluster provider's pools (docs/adoption.md):
// this provider serves the claims of an InClusterIPPool once the pool is
// adopted, through a MetalVRFIPPool of the same addresses (its companion),
// and those of an InClusterPrefixPool through a MetalVRFIPPool of the same
// prefixes in prefix mode.
const (
	// InClusterIPPoolKind is the in-cluster provider's namespaced pool kind,
	// of this API group.
	InClusterIPPoolKind = "InClusterIPPool"
	// GlobalInClusterIPPoolKind is its cluster-scoped pool kind, which
	// claims of every namespace name; its companion is a
	// GlobalMetalVRFIPPool.
	GlobalInClusterIPPoolKind = "GlobalInClusterIPPool"
	// InClusterPrefixPoolKind is the in-cluster provider's namespaced
	// prefix pool kind; its companion is a MetalVRFIPPool in prefix mode.
	InClusterPrefixPoolKind = "InClusterPrefixPool"
	// GlobalInClusterPrefixPoolKind is its cluster-scoped prefix pool kind;
	// its companion is a GlobalMetalVRFIPPool in prefix mode.
	GlobalInClusterPrefixPoolKind = "GlobalInClusterPrefixPool"

	// AdoptAnnotation, "true" on a pool of any of the four in-cluster
	// kinds, asks this provider to take the pool over.
	AdoptAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/adopt"

	// AdoptedFromAnnotation on a companion names the pool it serves:
	// "InClusterIPPool/<name>" (same namespace) on a MetalVRFIPPool,
	// "GlobalInClusterIPPool/<name>" on a GlobalMetalVRFIPPool, and the
	// same with the prefix kinds.
	AdoptedFromAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/adopted-from"

	// PausedForAdoptionAnnotation on an InClusterIPPool says this provider
	// paused it (cluster.x-k8s.io/paused), and when (RFC 3339).
	PausedForAdoptionAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/paused-for-adoption"

	// AdoptedPoolPrefix starts the name of an adopted address pool's
	// companion.
	AdoptedPoolPrefix = "incluster-"
	// AdoptedPrefixPoolPrefix starts the name of an adopted prefix pool's
	// companion. Neither start is a start of the other, so the companions
	// of an InClusterIPPool and an InClusterPrefixPool of one name never
	// share a name, whatever the names ("incluster-prefix-a" is the
	// companion of the address pool "prefix-a" only).
	AdoptedPrefixPoolPrefix = "inclusterprefix-"
)
