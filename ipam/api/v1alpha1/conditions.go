package v1alpha1

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
	// AllocatesElsewhereReason means the GlobalMetalVRFIPPool is a copy that
	// another management cluster allocates from (see
	// AllocatingClusterAnnotation): it keeps the addresses of the claims here
	// and hands out none until it is taken over.
	AllocatesElsewhereReason = "AllocatesElsewhere"
	// AllocatorInDoubtReason (an event) means a GlobalMetalVRFIPPool copy
	// that names no allocating cluster found IPAddresses of the pool handed
	// out by another management cluster: it names none, and hands out
	// nothing, until an administrator says which cluster allocates.
	AllocatorInDoubtReason = "AllocatorInDoubt"
	// HandedOverReason means the GlobalMetalVRFIPPool was handed over to
	// another management cluster and hands out nothing here.
	HandedOverReason = "HandedOver"
	// SourcesNotResolvedReason means the pool has no address yet because
	// its sources (spec.vrf, spec.networkRef) have not resolved; the
	// SourcesResolved condition says why.
	SourcesNotResolvedReason = "SourcesNotResolved"

	// SourcesResolvedCondition is True when every source of the pool
	// (spec.vrf, spec.networkRef) was read successfully on the last attempt.
	// When False, the pool keeps serving the last set it resolved for
	// transient failures (Metal API unavailable, credentials), which is
	// then stale, and drops it when the source says it is gone.
	SourcesResolvedCondition = "SourcesResolved"

	// SourcesResolvedReason: every source was read on the last attempt.
	SourcesResolvedReason = "Resolved"
	// CredentialsSecretNotFoundReason: the Secret named by spec.vrf.credentialsRef does not exist.
	CredentialsSecretNotFoundReason = "CredentialsSecretNotFound"
	// InvalidCredentialsReason: the Secret has no API key, or the Metal API refused it (401/403).
	InvalidCredentialsReason = "InvalidCredentials"
	// EndpointNotAllowedReason: the Secret's baseURL is not one of the Metal
	// API endpoints the operator allows (--metal-endpoints); no request
	// was sent.
	EndpointNotAllowedReason = "EndpointNotAllowed"
	// VRFNotFoundReason: the Metal API does not know the VRF (404).
	VRFNotFoundReason = "VRFNotFound"
	// VRFMismatchReason: the VRF is not in spec.vrf.projectID or spec.vrf.metro,
	// or a reservation of spec.vrf.reservationIDs is missing or not served by a Metal Gateway.
	VRFMismatchReason = "VRFMismatch"
	// VRFWithoutAddressesReason: the VRF gives the pool no address of its
	// family and scope (no IP reservation served by a Metal Gateway, or no
	// ip_ranges with scope IPRanges).
	VRFWithoutAddressesReason = "VRFWithoutAddresses"
	// MetalAPIUnavailableReason: the Metal API failed (5xx, timeout, rate limit).
	MetalAPIUnavailableReason = "MetalAPIUnavailable"
	// PacketClusterNotFoundReason: the PacketCluster named by spec.networkRef does not exist,
	// or the PacketCluster CRD is not installed.
	PacketClusterNotFoundReason = "PacketClusterNotFound"
	// NetworkNotFoundReason: the PacketCluster has no network of that name.
	NetworkNotFoundReason = "NetworkNotFound"
	// NetworkNotClusterAPIReason: the network's addresses are assigned by
	// DHCP (or unset), not by Cluster API, so the pool must not hand them out.
	NetworkNotClusterAPIReason = "NetworkNotAssignedByClusterAPI"
	// NetworkWithoutAddressesReason: the network gives the pool no address:
	// it has no ipAddresses, or none of the pool's IP family.
	NetworkWithoutAddressesReason = "NetworkWithoutAddresses"
)
