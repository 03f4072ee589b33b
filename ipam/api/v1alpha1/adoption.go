package v1alpha1

// Adoption of the reference in-cluster provider's pools (docs/adoption.md):
// this provider serves the claims of an InClusterIPPool once the pool is
// adopted, through a MetalVRFIPPool of the same addresses (its companion).
const (
	// InClusterIPPoolKind is the in-cluster provider's namespaced pool kind,
	// of this API group.
	InClusterIPPoolKind = "InClusterIPPool"
	// GlobalInClusterIPPoolKind is its cluster-scoped pool kind, which
	// claims of every namespace name; its companion is a
	// GlobalMetalVRFIPPool.
	GlobalInClusterIPPoolKind = "GlobalInClusterIPPool"

	// AdoptAnnotation, "true" on an InClusterIPPool or a
	// GlobalInClusterIPPool, asks this provider to
	// take the pool over.
	AdoptAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/adopt"

	// AdoptedFromAnnotation on a companion names the pool it serves:
	// "InClusterIPPool/<name>" (same namespace) on a MetalVRFIPPool,
	// "GlobalInClusterIPPool/<name>" on a GlobalMetalVRFIPPool.
	AdoptedFromAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/adopted-from"

	// PausedForAdoptionAnnotation on an InClusterIPPool says this provider
	// paused it (cluster.x-k8s.io/paused), and when (RFC 3339).
	PausedForAdoptionAnnotation = "metal-vrf.ipam.cluster.x-k8s.io/paused-for-adoption"

	// AdoptedPoolPrefix starts the name of an adopted pool's companion.
	AdoptedPoolPrefix = "incluster-"
)
