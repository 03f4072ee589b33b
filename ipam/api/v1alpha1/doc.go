// Package v1alpha1 holds the API of the metal-vrf IPAM provider: MetalVRFIPPool
// and its cluster-scoped sibling GlobalMetalVRFIPPool.
//
// The pools live in the CAPI IPAM group, ipam.cluster.x-k8s.io, like every other
// IPAM provider's pools, so an IPAddressClaim names them with the same apiGroup
// it uses for any pool.
//
// +kubebuilder:object:generate=true
// +groupName=ipam.cluster.x-k8s.io
package v1alpha1
