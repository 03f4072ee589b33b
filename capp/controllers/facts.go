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
// own, which only the facts of that condition implement, by embedding its
// mark: a fact put in another condition's slot does not compile.
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

// The marks, one per condition.
type (
	forClaims          struct{}
	forBootstrap       struct{}
	forDevice          struct{}
	forPorts           struct{}
	forEndpoint        struct{}
	forNode            struct{}
	forDeletion        struct{}
	forClusterEndpoint struct{}
	forClusterDeletion struct{}
)

func (forClaims) claimsFact()                   {}
func (forBootstrap) bootstrapFact()             {}
func (forDevice) deviceFact()                   {}
func (forPorts) portsFact()                     {}
func (forEndpoint) endpointFact()               {}
func (forNode) nodeFact()                       {}
func (forDeletion) deletionFact()               {}
func (forClusterEndpoint) clusterEndpointFact() {}
func (forClusterDeletion) clusterDeletionFact() {}

// The typed errors of the phases are facts too.
func (*setupError) bootstrapFact()         {}
func (*setupError) deviceFact()            {}
func (*setupError) deletionFact()          {}
func (*setupError) clusterEndpointFact()   {}
func (*setupError) clusterDeletionFact()   {}
func (*failureDomainError) deviceFact()    {}
func (*foreignSecretError) bootstrapFact() {}

// Facts any phase may record.
type (
	// metalCallFailed: a Metal API call failed; it is retried with backoff.
	metalCallFailed struct {
		forDevice
		forPorts
		forEndpoint
		forNode
		forDeletion
		forClusterEndpoint
		forClusterDeletion
		// what names the call, for messages.
		what string
		err  error
		// source names where the credentials came from; project is the
		// PacketCluster's spec.projectID.
		source, project string
	}
	// alreadyTrue: the condition was True as last written and the phase did
	// not look again.
	alreadyTrue struct {
		forEndpoint
		forNode
		reason, message string
	}
	// ipamMissing: the cluster serves no IPAddressClaim API.
	ipamMissing struct {
		forClaims
		forClusterEndpoint
	}
)

// Facts of a machine's claims (IPAddressClaimed).
type (
	// claimCount is how many of the machine's claims are bound, of all;
	// the claims' facts embed it, and with it the claims' mark.
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
	waitingForBootstrap struct{ forBootstrap }
	// bootstrapInvalid: the bootstrap data cannot be merged; err says why.
	bootstrapInvalid struct {
		forBootstrap
		err error
	}
	// vipNetworkMissing: a control-plane machine of a kube-vip cluster has
	// no network on the VIP's vxlan.
	vipNetworkMissing struct {
		forBootstrap
		cluster string
		vxlan   int
	}
	// waitingForClusterVIP: the PacketCluster's VIP is not bound yet.
	waitingForClusterVIP struct {
		forBootstrap
		cluster string
	}
	// clusterVIPInvalid: the PacketCluster's status.vip does not parse.
	clusterVIPInvalid struct {
		forBootstrap
		cluster string
		err     error
	}
	// bootstrapRendered: the user-data is in its Secret.
	bootstrapRendered struct {
		forBootstrap
		secret string
	}
)

// Facts of the device (DeviceReady).
type (
	// deviceSeen: the device as the platform shows it.
	deviceSeen struct {
		forDevice
		id, state string
		active    bool
	}
	// deviceGone: the device the machine had no longer exists.
	deviceGone struct {
		forDevice
		id string
	}
	// deviceNotOwned: the device found is not provably the machine's;
	// field names where it was found.
	deviceNotOwned struct {
		forDevice
		field string
		err   *device.NotOwnedError
	}
	// vlansMissing: networks whose VLANs the metro lacks, by field.
	vlansMissing struct {
		forDevice
		forPorts
		problems []vlanProblem
		// failureDomain and metro are set when the Machine's failure
		// domain chose the metro.
		failureDomain, metro string
	}
	// waitingForSlot: too many devices are in creation; waiting says for
	// which.
	waitingForSlot struct {
		forDevice
		waiting string
	}
	// reservationUnavailable: spec.hardwareReservationID cannot be used.
	reservationUnavailable struct {
		forDevice
		id  string
		err *device.ReservationError
	}
	// createRefused: the platform refused the create (422).
	createRefused struct {
		forDevice
		plan, os, metro, facility, reservation string
		messages                               []string
	}
	// projectUnreachable: the platform refused the project (404, 403).
	projectUnreachable struct {
		forDevice
		project, source string
		err             error
	}
	// deviceFailed: the platform failed the device (or deleted it);
	// message is the plan's, platformReason the platform's newest event.
	deviceFailed struct {
		forDevice
		deleted                 bool
		message, platformReason string
	}
)

func (claimCount) claimsFact() {}

// vlanProblem is a network whose VLAN cannot be used.
type vlanProblem struct {
	field string
	err   error
}

// Facts of the ports (VLANsAttached).
type (
	vlansAttached struct {
		forPorts
		spec device.Spec
	}
	batchInFlight struct {
		forPorts
		batch, port string
	}
	portFailed struct {
		forPorts
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
		forPorts
		disbond bool
		port    string
		vlans   []device.VLAN
	}
)

// Facts of the endpoint's routing (ControlPlaneEndpointAssigned).
type (
	// endpointNotOwned: the reservation the PacketCluster names is not
	// provably its own.
	endpointNotOwned struct {
		forEndpoint
		cluster, id string
		err         *device.NotOwnedError
	}
	// endpointRouted: the endpoint is routed, to this device or (elsewhere)
	// to others.
	endpointRouted struct {
		forEndpoint
		address, device string
		elsewhere       []string
	}
	endpointAssignRefused struct {
		forEndpoint
		address, device string
		messages        []string
	}
)

// Facts of the node's report (NodeNetworkConfigured).
type (
	// nodeReportNotExpected: the device was not created by this provider.
	nodeReportNotExpected struct {
		forNode
		device, tag string
	}
	// nodeReported: what the node said, and whether it is late.
	nodeReported struct {
		forNode
		device  string
		report  device.Report
		late    bool
		timeout time.Duration
	}
)

// Facts of a machine's deletion (Deleting).
type (
	deviceLeftAlone struct {
		forDeletion
		err *device.NotOwnedError
	}
	deviceGoing struct {
		forDeletion
		id string
	}
	claimsReleasing struct {
		forDeletion
		remaining int
	}
)

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
	endpointSetByUser struct {
		forClusterEndpoint
		endpoint string
	}
	// endpointMissing: nothing sets the endpoint with this vipManager (or,
	// for CPEM, without spec.metro).
	endpointMissing struct {
		forClusterEndpoint
		vipManager infrav1.VIPManager
	}
	// reservationGone: the reservation on record is gone from the platform.
	reservationGone struct {
		forClusterEndpoint
		id, host string
	}
	// reservationNotOwned: the reservation on record is not provably the
	// cluster's.
	reservationNotOwned struct {
		forClusterEndpoint
		id  string
		err error
	}
	// reservationRefused: the platform refused to reserve (422).
	reservationRefused struct {
		forClusterEndpoint
		metro    string
		messages []string
	}
	// endpointReserved: the endpoint is the reservation's.
	endpointReserved struct {
		forClusterEndpoint
		endpoint, id, address, metro string
	}
	// vipClaimDeleting: the VIP's claim is being deleted.
	vipClaimDeleting struct {
		forClusterEndpoint
		claim string
	}
	// vipWaiting: the VIP's claim is not bound yet.
	vipWaiting struct {
		forClusterEndpoint
		claim, kind, pool string
	}
	// vipNotAnAddress: the claim's IPAddress holds no IP address.
	vipNotAnAddress struct {
		forClusterEndpoint
		address, claim, value string
	}
	// vipEndpointMismatch: the endpoint's host is another address.
	vipEndpointMismatch struct {
		forClusterEndpoint
		host, vip, claim string
	}
	// vipClaimed: the endpoint is the VIP bound to the claim.
	vipClaimed struct {
		forClusterEndpoint
		endpoint, vip, claim, kind, pool string
	}
)

// Facts of a PacketCluster's deletion (Deleting).
type (
	reservationsGoing struct {
		forClusterDeletion
		ids []string
	}
	vipClaimGoing struct {
		forClusterDeletion
		claim string
	}
)

// clusterFacts are the facts of one PacketCluster reconcile.
type clusterFacts struct {
	endpoint clusterEndpointFact
	deletion clusterDeletionFact
}
