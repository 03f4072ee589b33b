package v1beta1

// Condition types of a PacketMachine, and their reasons.
const (
	// IPAddressClaimedCondition is True once every network with
	// addressFromPool has a bound, valid address. It keeps the type name the
	// IPAM consumer proposals (CAPV, CAPP) use; its message counts "N/M bound".
	IPAddressClaimedCondition = "IPAddressClaimed"

	// IPAddressClaimsFulfilledCondition is the CAPI v1beta2-style twin of
	// IPAddressClaimed, with the same status and message and reasons named
	// after the outcome.
	IPAddressClaimsFulfilledCondition = "IPAddressClaimsFulfilled"

	// BootstrapDataRenderedCondition is True once the user-data Secret holds
	// the bootstrap data merged with the network configuration.
	BootstrapDataRenderedCondition = "BootstrapDataRendered"
)

// Reasons of IPAddressClaimed and IPAddressClaimsFulfilled.
const (
	// IPAddressClaimsBeingCreatedReason: claims are being created.
	IPAddressClaimsBeingCreatedReason = "IPAddressClaimsBeingCreated"
	// WaitingForIPAddressReason: claims exist, not all are bound yet.
	WaitingForIPAddressReason = "WaitingForIPAddress"
	// IPAddressInvalidReason: a bound address cannot be used on the machine.
	IPAddressInvalidReason = "IPAddressInvalid"
	// IPAddressClaimNotFoundReason: a claim went missing; it is recreated.
	IPAddressClaimNotFoundReason = "IPAddressClaimNotFound"
	// IPAMNotInstalledReason: the cluster has no IPAddressClaim API (CAPI's
	// IPAM CRDs are missing).
	IPAMNotInstalledReason = "IPAMNotInstalled"
	// IPAddressClaimedReason: every claim is bound to a valid address.
	IPAddressClaimedReason = "IPAddressClaimed"
	// NoIPAddressClaimsReason: no network takes its address from a pool.
	NoIPAddressClaimsReason = "NoIPAddressClaims"
	// IPAddressClaimsFulfilledReason: v1beta2 reason when every claim is bound.
	IPAddressClaimsFulfilledReason = "IPAddressClaimsFulfilled"
	// IPAddressClaimsNotFulfilledReason: v1beta2 reason while some are not.
	IPAddressClaimsNotFulfilledReason = "IPAddressClaimsNotFulfilled"
)

// Reasons of BootstrapDataRendered.
const (
	// WaitingForBootstrapDataReason: the Machine has no bootstrap data yet.
	WaitingForBootstrapDataReason = "WaitingForBootstrapData"
	// WaitingForAddressesReason: rendering waits for the networks' addresses.
	WaitingForAddressesReason = "WaitingForAddresses"
	// BootstrapDataInvalidReason: the bootstrap data cannot be merged (not a
	// cloud-config, or it conflicts with the network configuration).
	BootstrapDataInvalidReason = "BootstrapDataInvalid"
	// BootstrapDataRenderedReason: the user-data Secret is current.
	BootstrapDataRenderedReason = "BootstrapDataRendered"
)
