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
	// IPAMNotInstalledReason: the cluster has no IPAddressClaim API (CAPI's
	// IPAM CRDs are missing).
	IPAMNotInstalledReason = "IPAMNotInstalled"
	// PoolKindNotServedReason: an addressFromPool names a kind the API
	// server does not serve, so no IPAM provider can answer its claim.
	PoolKindNotServedReason = "PoolKindNotServed"
	// NoIPAMProviderAnswerReason: a claim has had no answer at all for a
	// while: no running IPAM provider serves its pool's kind.
	NoIPAMProviderAnswerReason = "NoIPAMProviderAnswer"
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
	// BootstrapDataInvalidReason: the bootstrap data cannot be merged (not a
	// cloud-config, or it conflicts with the network configuration).
	BootstrapDataInvalidReason = "BootstrapDataInvalid"
	// BootstrapDataRenderedReason: the user-data Secret is current.
	BootstrapDataRenderedReason = "BootstrapDataRendered"
	// UserDataSecretConflictReason: a Secret of the user-data Secret's name
	// exists and is not controlled by the PacketMachine; it is left alone.
	UserDataSecretConflictReason = "UserDataSecretConflict"
	// VIPNetworkMissingReason: a control-plane machine of a cluster with a
	// VIP has no network on the VLAN (the PacketCluster's spec.vip.vxlan)
	// whose sub-interface kube-vip would announce it on.
	VIPNetworkMissingReason = "VIPNetworkMissing"
	// WaitingForControlPlaneEndpointReason: a control-plane machine of a
	// cluster whose PacketCluster reserves its endpoint (vipManager CPEM)
	// waits for the reservation, whose address its user-data binds to lo.
	WaitingForControlPlaneEndpointReason = "WaitingForControlPlaneEndpoint"
)

// Condition types of the device and the node, and the summary.
const (
	// DeviceReadyCondition is True once the machine's device is active. Its
	// message says what the machine waits for meanwhile.
	DeviceReadyCondition = "DeviceReady"

	// VLANsAttachedCondition is True once every port carries its networks'
	// VLANs (and the NICs that carry networks are out of the bond).
	VLANsAttachedCondition = "VLANsAttached"

	// NodeNetworkConfiguredCondition follows what the node reported of its
	// network configuration through the metadata service's user state.
	NodeNetworkConfiguredCondition = "NodeNetworkConfigured"

	// ControlPlaneEndpointAssignedCondition says whether the address the
	// provider reserved as the cluster's endpoint (vipManager CPEM) is routed
	// to a control-plane device. Only control-plane machines of such
	// clusters have it.
	ControlPlaneEndpointAssignedCondition = "ControlPlaneEndpointAssigned"

	// ReadyCondition summarises the conditions above (CAPI's Ready).
	ReadyCondition = "Ready"

	// DeletingCondition says what the deletion of the machine waits for.
	DeletingCondition = "Deleting"
)

// Reasons shared by the device, VLAN and node conditions.
const (
	// WaitingForPreviousReason: an earlier step has to finish first; the
	// message names it.
	WaitingForPreviousReason = "WaitingForPrevious"
	// NoCredentialsReason: neither the PacketCluster nor the manager's
	// environment gives Metal API credentials.
	NoCredentialsReason = "NoCredentials"
	// CredentialsSecretNotFoundReason: the Secret named by the PacketCluster's
	// spec.credentialsRef does not exist.
	CredentialsSecretNotFoundReason = "CredentialsSecretNotFound"
	// InvalidCredentialsReason: the Secret has no apiKey, or the Metal API
	// refused the credentials.
	InvalidCredentialsReason = "InvalidCredentials"
	// EndpointNotAllowedReason: the credentials Secret's baseURL is not one
	// of the Metal API endpoints the operator allows; no request was sent.
	EndpointNotAllowedReason = "EndpointNotAllowed"
	// APIKeyNotAvailableReason: the bootstrap data asks for {{ .apiKey }}
	// and the PacketCluster has no credentials Secret of its own to take it
	// from.
	APIKeyNotAvailableReason = "APIKeyNotAvailable"
	// InfrastructureNotFoundReason: the Cluster names no PacketCluster, or it
	// does not exist.
	InfrastructureNotFoundReason = "InfrastructureNotFound"
	// ProjectNotFoundReason: the machine's project does not exist, or the
	// credentials cannot reach it.
	ProjectNotFoundReason = "ProjectNotFound"
	// MetalAPIErrorReason: the Metal API failed; the call is retried with
	// backoff.
	MetalAPIErrorReason = "MetalAPIError"
)

// Reasons of DeviceReady.
const (
	// WaitingForCreationSlotReason: the manager's limit of device creations
	// in flight is reached.
	WaitingForCreationSlotReason = "WaitingForCreationSlot"
	// DeviceProvisioningReason: the device is being provisioned.
	DeviceProvisioningReason = "DeviceProvisioning"
	// DeviceCreateFailedReason: the platform refused to create the device;
	// retried with backoff.
	DeviceCreateFailedReason = "DeviceCreateFailed"
	// HardwareReservationUnavailableReason: no reservation of
	// spec.hardwareReservationID can take the device.
	HardwareReservationUnavailableReason = "HardwareReservationUnavailable"
	// DeviceFailedReason: the platform failed to provision the device.
	DeviceFailedReason = "DeviceFailed"
	// DeviceDeletedReason: the device is being deleted outside Cluster API.
	DeviceDeletedReason = "DeviceDeleted"
	// AmbiguousDeviceReason: more than one device carries the machine's tag.
	AmbiguousDeviceReason = "AmbiguousDevice"
	// DeviceNotOwnedReason: the device spec.providerID names (or the one
	// carrying the machine's tag) is not provably the machine's: another
	// project, or tags of another machine or cluster. Nothing but a read is
	// done with it, and deleting the machine leaves it alone.
	DeviceNotOwnedReason = "DeviceNotOwned"
	// FailureDomainNotFoundReason: the Machine's spec.failureDomain is not a
	// failure domain of its PacketCluster; no device is created.
	FailureDomainNotFoundReason = "FailureDomainNotFound"
	// FailureDomainConflictReason: the PacketMachine's spec.metro or
	// spec.facility places the device outside the Machine's failure domain;
	// no device is created.
	FailureDomainConflictReason = "FailureDomainConflict"
	// DeviceActiveReason: the device is active.
	DeviceActiveReason = "DeviceActive"
)

// Reasons of VLANsAttached.
const (
	// VLANNotFoundReason: a network's VLAN does not exist in the device's
	// metro (the one its failure domain places it in, before it is created:
	// then DeviceReady has it and no device is created).
	VLANNotFoundReason = "VLANNotFound"
	// PortNotFoundReason: the device has no port of that name.
	PortNotFoundReason = "PortNotFound"
	// PortDisbondingReason: a NIC is being taken out of the bond.
	PortDisbondingReason = "PortDisbonding"
	// VLANsAttachingReason: a VLAN assignment batch is in flight.
	VLANsAttachingReason = "VLANsAttaching"
	// VLANAttachFailedReason: the platform failed a port's batch.
	VLANAttachFailedReason = "VLANAttachFailed"
	// VLANsAttachedReason: every port carries its VLANs.
	VLANsAttachedReason = "VLANsAttached"
)

// Reasons of NodeNetworkConfigured.
const (
	// WaitingForNodeReason: the node has not reported its network yet.
	WaitingForNodeReason = "WaitingForNode"
	// NodeNetworkConfiguredReason: the node reported success.
	NodeNetworkConfiguredReason = "NodeNetworkConfigured"
	// NodeReportNotExpectedReason: the device was created by upstream CAPP,
	// whose user-data has no network script to report.
	NodeReportNotExpectedReason = "NodeReportNotExpected"
	// NodeNetworkFailedReason: the node reported a failure; the message is
	// the node's.
	NodeNetworkFailedReason = "NodeNetworkFailed"
	// TimeoutReason: the node did not report within the timeout.
	TimeoutReason = "Timeout"
)

// Reasons of Deleting.
const (
	// DeletingDeviceReason: waiting for the device to be gone.
	DeletingDeviceReason = "DeletingDevice"
	// ReleasingAddressesReason: the device is gone, the claims are being
	// released.
	ReleasingAddressesReason = "ReleasingAddresses"
)

// Condition types of a PacketCluster; it also has Ready (summarising
// ControlPlaneEndpointReady), Deleting and CAPI's Paused.
const (
	// ControlPlaneEndpointReadyCondition is True once spec.controlPlaneEndpoint
	// is set: by the user, to the public IPv4 address the provider reserved
	// (vipManager CPEM), or to the VIP claimed from spec.vip's pool.
	ControlPlaneEndpointReadyCondition = "ControlPlaneEndpointReady"
)

// Reasons of ControlPlaneEndpointReady; the credential and project reasons
// above apply too.
const (
	// ControlPlaneEndpointSetByUserReason: spec.controlPlaneEndpoint.host was
	// set by the user and is used as is.
	ControlPlaneEndpointSetByUserReason = "ControlPlaneEndpointSetByUser"
	// ControlPlaneEndpointReservedReason: the endpoint is a public IPv4
	// address the provider reserved in the cluster's metro.
	ControlPlaneEndpointReservedReason = "ControlPlaneEndpointReserved"
	// ControlPlaneEndpointRequiredReason: the vipManager does not provide an
	// endpoint; the user must set spec.controlPlaneEndpoint.
	ControlPlaneEndpointRequiredReason = "ControlPlaneEndpointRequired"
	// MetroRequiredReason: a reservation needs spec.metro, which is empty.
	MetroRequiredReason = "MetroRequired"
	// EndpointReservationRefusedReason: the platform refused to reserve the
	// address; retried with backoff.
	EndpointReservationRefusedReason = "EndpointReservationRefused"
	// EndpointReservationNotFoundReason: the reservation behind the endpoint
	// is gone from the platform.
	EndpointReservationNotFoundReason = "EndpointReservationNotFound"
	// EndpointReservationNotOwnedReason: the reservation the annotation
	// names is not provably the cluster's (another project, or without the
	// cluster's endpoint tag): it is neither routed nor released.
	EndpointReservationNotOwnedReason = "EndpointReservationNotOwned"
	// WaitingForVIPReason: the IPAddressClaim of spec.vip is not bound yet
	// (on a PacketMachine's BootstrapDataRendered: its PacketCluster's VIP).
	WaitingForVIPReason = "WaitingForVIP"
	// VIPClaimedReason: the endpoint is the VIP bound to the claim of
	// spec.vip.
	VIPClaimedReason = "VIPClaimed"
	// VIPAddressInvalidReason: the address bound to the claim of spec.vip
	// cannot be the endpoint (not an address, or another host is set).
	VIPAddressInvalidReason = "VIPAddressInvalid"
)

// Reasons of ControlPlaneEndpointAssigned.
const (
	// EndpointAssignedReason: the endpoint's address is routed to this
	// machine's device.
	EndpointAssignedReason = "EndpointAssigned"
	// EndpointAssignedElsewhereReason: another control-plane device has the
	// address; when that machine is deleted, the address goes to a
	// control-plane machine whose node has joined.
	EndpointAssignedElsewhereReason = "EndpointAssignedElsewhere"
	// EndpointAssignRefusedReason: the platform refused to route the address
	// to the device; retried with backoff.
	EndpointAssignRefusedReason = "EndpointAssignRefused"
	// EndpointNotRoutedReason: the control plane is initialized and the
	// address is routed to no device (its holder was deleted); it goes to
	// a control-plane machine whose node has joined, which this one's has
	// not yet.
	EndpointNotRoutedReason = "EndpointNotRouted"
)

// Reasons of a PacketCluster's Deleting.
const (
	// ReleasingEndpointReason: waiting for the endpoint's reservation to be
	// gone.
	ReleasingEndpointReason = "ReleasingEndpoint"
	// ReleasingVIPReason: waiting for the IPAddressClaim of spec.vip to be
	// gone.
	ReleasingVIPReason = "ReleasingVIP"
)
