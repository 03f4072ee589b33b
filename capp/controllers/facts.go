package controllers

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
)

// A fact is what a phase observed about one condition's subject: one of the
// types below, or a typed error of the phase (*setupError,
// *failureDomainError, *foreignSecretError). Phases only record facts; the
// status files (packetmachine_status.go, packetcluster_status.go) turn
// them into conditions and status fields.
//
// Each condition's slot in machineFacts and clusterFacts has a type of its
// own, whose method only the facts of that condition have: a fact put in
// another condition's slot does not compile.
type (
	claimsFact          interface{ claimsFact() }          // IPAddressClaimed
	bootstrapFact       interface{ bootstrapFact() }       // BootstrapDataRendered
	deviceFact          interface{ deviceFact() }          // DeviceReady
	portsFact           interface{ portsFact() }           // VLANsAttached
	endpointFact        interface{ endpointFact() }        // ControlPlaneEndpointAssigned
	nodeFact            interface{ nodeFact() }            // NodeNetworkConfigured
	deletionFact        interface{ deletionFact() }        // a PacketMachine's Deleting
	clusterEndpointFact interface{ clusterEndpointFact() } // ControlPlaneEndpointReady
	clusterDeletionFact interface{ clusterDeletionFact() } // a PacketCluster's Deleting
)

// Facts any phase may record.
type (
	// metalCallFailed: a Metal API call failed; it is retried with backoff.
	metalCallFailed struct {
		// what names the call, for messages.
		what string
		err  error
		// source names where the credentials came from; project is the
		// PacketCluster's spec.projectID.
		source, project string
	}
	// alreadyTrue: the condition was True as last written and the phase did
	// not look again.
	alreadyTrue struct{ reason, message string }
	// ipamMissing: the cluster serves no IPAddressClaim API.
	ipamMissing struct{}
)

func (metalCallFailed) deviceFact()          {}
func (metalCallFailed) portsFact()           {}
func (metalCallFailed) endpointFact()        {}
func (metalCallFailed) nodeFact()            {}
func (metalCallFailed) deletionFact()        {}
func (metalCallFailed) clusterEndpointFact() {}
func (metalCallFailed) clusterDeletionFact() {}
func (*setupError) bootstrapFact()           {}
func (*setupError) deviceFact()              {}
func (*setupError) deletionFact()            {}
func (*setupError) clusterEndpointFact()     {}
func (*setupError) clusterDeletionFact()     {}
func (alreadyTrue) endpointFact()            {}
func (alreadyTrue) nodeFact()                {}
func (ipamMissing) claimsFact()              {}
func (ipamMissing) clusterEndpointFact()     {}

// Facts of a machine's claims (IPAddressClaimed).
type (
	// claimCount is how many of the machine's claims are bound, of all;
	// the other facts of the claims embed it, and with it claimsFact.
	claimCount struct{ bound, total int }
	// claimsDeleting: claims the machine uses are being deleted.
	claimsDeleting struct {
		claimCount
		names []string
	}
	// claimsWaiting: claims are not bound yet.
	claimsWaiting struct {
		claimCount
		// created is set when a claim was created by this reconcile.
		created bool
		claims  []claimWait
	}
	// addressesUnusable: the bound addresses cannot be used as the spec says.
	addressesUnusable struct {
		claimCount
		err error
	}
	// claimsBound: every claim is bound to a usable address.
	claimsBound struct {
		claimCount
		networks resolvedNetworks
	}
)

func (claimCount) claimsFact() {}

// claimWait is what is known of a claim that is not bound.
type claimWait struct {
	name string
	pool corev1.TypedLocalObjectReference
	// path is the field naming the pool.
	path string
	// refused is set when the claim's Ready condition is False, saying why
	// in refusal.
	refused  bool
	refusal  string
	answered bool
	// kindServed is false when the API server serves no such pool kind;
	// suggestion then names one it serves under another spelling.
	kindServed bool
	suggestion string
	age        time.Duration
}

// Facts of the user-data (BootstrapDataRendered).
type (
	waitingForBootstrap struct{}
	// bootstrapInvalid: the bootstrap data cannot be merged; err says why.
	bootstrapInvalid struct{ err error }
	// vipNetworkMissing: a control-plane machine of a kube-vip cluster has
	// no network on the VIP's vxlan.
	vipNetworkMissing struct {
		cluster string
		vxlan   int
	}
	// waitingForClusterVIP: the PacketCluster's VIP is not bound yet.
	waitingForClusterVIP struct{ cluster string }
	// clusterVIPInvalid: the PacketCluster's status.vip does not parse.
	clusterVIPInvalid struct {
		cluster string
		err     error
	}
	// waitingForClusterEndpoint: the PacketCluster reserves its endpoint
	// (vipManager CPEM) and has not yet.
	waitingForClusterEndpoint struct{ cluster string }
	// clusterEndpointInvalid: the host of the endpoint the PacketCluster
	// reserved is not an IP address.
	clusterEndpointInvalid struct {
		cluster string
		host    string
	}
	// bootstrapRendered: the user-data is in its Secret.
	bootstrapRendered struct{ secret string }
)

func (waitingForBootstrap) bootstrapFact()       {}
func (bootstrapInvalid) bootstrapFact()          {}
func (vipNetworkMissing) bootstrapFact()         {}
func (waitingForClusterVIP) bootstrapFact()      {}
func (clusterVIPInvalid) bootstrapFact()         {}
func (waitingForClusterEndpoint) bootstrapFact() {}
func (clusterEndpointInvalid) bootstrapFact()    {}
func (bootstrapRendered) bootstrapFact()         {}
func (*foreignSecretError) bootstrapFact()       {}

// Facts of the device (DeviceReady).
type (
	// deviceSeen: the device as the platform shows it.
	deviceSeen struct {
		id, state string
		active    bool
	}
	// deviceGone: the device the machine had no longer exists.
	deviceGone struct{ id string }
	// deviceNotOwned: the device found is not provably the machine's;
	// field names where it was found.
	deviceNotOwned struct {
		field string
		err   *device.NotOwnedError
	}
	// vlansMissing: networks whose VLANs the metro lacks, by field.
	vlansMissing struct {
		problems []vlanProblem
		// failureDomain and metro are set when the Machine's failure
		// domain chose the metro.
		failureDomain, metro string
	}
	// waitingForSlot: too many devices are in creation; waiting says for
	// which.
	waitingForSlot struct{ waiting string }
	// reservationUnavailable: spec.hardwareReservationID cannot be used.
	reservationUnavailable struct {
		id  string
		err *device.ReservationError
	}
	// createRefused: the platform refused the create (422).
	createRefused struct {
		plan, os, metro, facility, reservation string
		messages                               []string
	}
	// projectUnreachable: the platform refused the project (404, 403).
	projectUnreachable struct {
		project, source string
		err             error
	}
	// deviceFailed: the platform failed the device (or deleted it);
	// message is the plan's, platformReason the platform's newest event.
	deviceFailed struct {
		deleted                 bool
		message, platformReason string
	}
)

func (deviceSeen) deviceFact()             {}
func (deviceGone) deviceFact()             {}
func (deviceNotOwned) deviceFact()         {}
func (vlansMissing) deviceFact()           {}
func (waitingForSlot) deviceFact()         {}
func (reservationUnavailable) deviceFact() {}
func (createRefused) deviceFact()          {}
func (projectUnreachable) deviceFact()     {}
func (deviceFailed) deviceFact()           {}
func (*failureDomainError) deviceFact()    {}

// vlanProblem is a network whose VLAN cannot be used.
type vlanProblem struct {
	field string
	err   error
}

// Facts of the ports (VLANsAttached).
type (
	vlansAttached struct{ spec device.Spec }
	batchInFlight struct{ batch, port string }
	portFailed    struct {
		// index is the port's in spec.ports when the device lacks it
		// (notFound).
		notFound bool
		index    int
		port     string
		message  string
	}
	// portStepSent: this reconcile took the port out of bond0 (disbond) or
	// sent its VLANs.
	portStepSent struct {
		disbond bool
		port    string
		vlans   []device.VLAN
	}
)

func (vlansMissing) portsFact()  {}
func (vlansAttached) portsFact() {}
func (batchInFlight) portsFact() {}
func (portFailed) portsFact()    {}
func (portStepSent) portsFact()  {}

// Facts of the endpoint's routing (ControlPlaneEndpointAssigned).
type (
	// endpointNotOwned: the reservation the PacketCluster names is not
	// provably its own.
	endpointNotOwned struct {
		cluster, id string
		err         *device.NotOwnedError
	}
	// endpointRouted: the endpoint is routed, to this device or (elsewhere)
	// to others.
	endpointRouted struct {
		address, device string
		elsewhere       []string
	}
	endpointAssignRefused struct {
		address, device string
		messages        []string
	}
	// endpointNotRouted: the endpoint is routed to no device and this
	// machine's node has not joined the initialized control plane, so it
	// may not take it.
	endpointNotRouted struct{ address string }
)

func (endpointNotOwned) endpointFact()      {}
func (endpointRouted) endpointFact()        {}
func (endpointAssignRefused) endpointFact() {}
func (endpointNotRouted) endpointFact()     {}

// Facts of the node's report (NodeNetworkConfigured).
type (
	// nodeReportNotExpected: the device was not created by this provider.
	nodeReportNotExpected struct{ device, tag string }
	// nodeReported: what the node said, and whether it is late.
	nodeReported struct {
		device  string
		report  device.Report
		late    bool
		timeout time.Duration
	}
)

func (nodeReportNotExpected) nodeFact() {}
func (nodeReported) nodeFact()          {}

// Facts of a machine's deletion (Deleting).
type (
	deviceLeftAlone struct{ err *device.NotOwnedError }
	deviceGoing     struct{ id string }
	claimsReleasing struct{ remaining int }
)

func (deviceLeftAlone) deletionFact() {}
func (deviceGoing) deletionFact()     {}
func (claimsReleasing) deletionFact() {}

// machineFacts are the facts of one PacketMachine reconcile, one per
// condition; nil when its phase did not run or recorded nothing.
type machineFacts struct {
	claims    claimsFact
	bootstrap bootstrapFact
	device    deviceFact
	ports     portsFact
	endpoint  endpointFact
	node      nodeFact
	deletion  deletionFact
}

// Facts of a PacketCluster's endpoint (ControlPlaneEndpointReady).
type (
	// endpointSetByUser: spec.controlPlaneEndpoint is the user's.
	endpointSetByUser struct{ endpoint string }
	// endpointMissing: nothing sets the endpoint with this vipManager (or,
	// for CPEM, without spec.metro).
	endpointMissing struct{ vipManager infrav1.VIPManager }
	// reservationGone: the reservation on record is gone from the platform.
	reservationGone struct{ id, host string }
	// reservationNotOwned: the reservation on record is not provably the
	// cluster's.
	reservationNotOwned struct {
		id  string
		err error
	}
	// reservationRefused: the platform refused to reserve (422).
	reservationRefused struct {
		metro    string
		messages []string
	}
	// endpointReserved: the endpoint is the reservation's.
	endpointReserved struct{ endpoint, id, address, metro string }
	// vipClaimDeleting: the VIP's claim is being deleted.
	vipClaimDeleting struct{ claim string }
	// vipWaiting: the VIP's claim is not bound yet.
	vipWaiting struct{ claim, kind, pool string }
	// vipNotAnAddress: the claim's IPAddress holds no IP address.
	vipNotAnAddress struct{ address, claim, value string }
	// vipEndpointMismatch: the endpoint's host is another address.
	vipEndpointMismatch struct{ host, vip, claim string }
	// vipClaimed: the endpoint is the VIP bound to the claim.
	vipClaimed struct{ endpoint, vip, claim, kind, pool string }
)

func (endpointSetByUser) clusterEndpointFact()   {}
func (endpointMissing) clusterEndpointFact()     {}
func (reservationGone) clusterEndpointFact()     {}
func (reservationNotOwned) clusterEndpointFact() {}
func (reservationRefused) clusterEndpointFact()  {}
func (endpointReserved) clusterEndpointFact()    {}
func (vipClaimDeleting) clusterEndpointFact()    {}
func (vipWaiting) clusterEndpointFact()          {}
func (vipNotAnAddress) clusterEndpointFact()     {}
func (vipEndpointMismatch) clusterEndpointFact() {}
func (vipClaimed) clusterEndpointFact()          {}

// Facts of a PacketCluster's deletion (Deleting).
type (
	reservationsGoing struct{ ids []string }
	vipClaimGoing     struct{ claim string }
)

func (reservationsGoing) clusterDeletionFact() {}
func (vipClaimGoing) clusterDeletionFact()     {}

// clusterFacts are the facts of one PacketCluster reconcile.
type clusterFacts struct {
	endpoint clusterEndpointFact
	deletion clusterDeletionFact
}
