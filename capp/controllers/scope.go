package controllers

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// machineScope is what the phases of one reconcile share: the objects read
// before the phases run, what each phase found for the next, and what they
// observed for the conditions.
type machineScope struct {
	PacketMachine *infrav1.PacketMachine
	// Machine and Cluster are nil while CAPI has not linked the machine yet
	// (and may be nil when a machine is deleted).
	Machine *clusterv1.Machine
	Cluster *clusterv1.Cluster

	// Networks are the machine's networks with their addresses, set by
	// reconcileIPAddresses.
	Networks []cloudinit.Network
	// UserData is the rendered user-data, set by reconcileBootstrapData.
	UserData []byte
	// vlanAddresses are the addresses of the machine's networks, set by
	// reconcileIPAddresses.
	vlanAddresses []clusterv1.MachineAddress
	// access reaches the machine's device, set by the first phase that
	// needs the Metal API.
	access *metalAccess
	// Device is the machine's device as the platform shows it, proven the
	// machine's; nil when it has none or it was not read.
	Device *device.Device
	// placement is where the device is created, set by ensureDevice.
	placement placement

	observations
	deleting bool
	// metalFailed is set when a Metal call failed in this reconcile, and
	// backingOff when it made none because an earlier one had failed: the
	// backoff is reset only after a reconcile with neither.
	metalFailed, backingOff bool
}

// observations are what the phases of one reconcile observed, for the
// function that derives the conditions from them.
type observations struct {
	// observed are the conditions the phases observed, by type.
	observed map[string]observation
	// stoppedAt is the index of the phase that stopped the run; failed is
	// set when it stopped on an error rather than waiting.
	stoppedAt int
	failed    bool
}

// observation is a condition as a phase observed it.
type observation struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

// observe records a condition; setConditions writes it. The message is
// bounded: it may quote values of the spec, claims and the platform.
func (o *observations) observe(conditionType string, status metav1.ConditionStatus, reason, text string) {
	if o.observed == nil {
		o.observed = map[string]observation{}
	}
	o.observed[conditionType] = observation{status: status, reason: reason, message: message.Bound(text)}
}

func (o *observations) observeTrue(conditionType, reason, message string) {
	o.observe(conditionType, metav1.ConditionTrue, reason, message)
}

func (o *observations) observeFalse(conditionType, reason, message string) {
	o.observe(conditionType, metav1.ConditionFalse, reason, message)
}

// stop records where a run of phases stopped, and whether on an error.
func (o *observations) stop(at int, failed bool) { o.stoppedAt, o.failed = at, failed }

// reasonChanges reports whether the condition's reason, as last written,
// differs from reason: events are emitted on such changes only.
func (s *machineScope) reasonChanges(conditionType, reason string) bool {
	return conditions.GetReason(s.PacketMachine, conditionType) != reason
}

// lifecycle are the conditions of a machine's phases, in their order, each
// with what a machine waits for while it is not True.
var lifecycle = []struct {
	conditionType string
	waitingFor    string
	// optional conditions apply to some machines only: they appear once
	// their phase observed them, never as waiting.
	optional bool
}{
	{infrav1.IPAddressClaimedCondition, "the networks' addresses (IPAddressClaimed)", false},
	{infrav1.BootstrapDataRenderedCondition, "the user-data (BootstrapDataRendered)", false},
	{infrav1.DeviceReadyCondition, "the device (DeviceReady)", false},
	{infrav1.VLANsAttachedCondition, "the VLANs (VLANsAttached)", false},
	{infrav1.ControlPlaneEndpointAssignedCondition, "the endpoint's address (ControlPlaneEndpointAssigned)", true},
	{infrav1.NodeNetworkConfiguredCondition, "the node's report (NodeNetworkConfigured)", false},
}

// ownedConditions are the conditions this reconciler writes: the patch
// helper lets its values win over concurrent writers'.
var ownedConditions = []string{
	infrav1.IPAddressClaimedCondition,
	infrav1.IPAddressClaimsFulfilledCondition,
	infrav1.BootstrapDataRenderedCondition,
	infrav1.DeviceReadyCondition,
	infrav1.VLANsAttachedCondition,
	infrav1.ControlPlaneEndpointAssignedCondition,
	infrav1.NodeNetworkConfiguredCondition,
	infrav1.ReadyCondition,
	infrav1.DeletingCondition,
}

// setConditions derives every condition from what the phases observed, the
// one place conditions are written. A phase that did not run because an
// earlier one waits says what it waits for; after an error, what was not
// observed keeps its last value. Ready summarises the lifecycle. The
// status then describes the machine's current generation.
func (s *machineScope) setConditions() {
	pm := s.PacketMachine
	pm.Status.ObservedGeneration = pm.Generation
	if o, ok := s.observed[infrav1.DeletingCondition]; ok {
		conditions.Set(pm, metav1.Condition{Type: infrav1.DeletingCondition, Status: o.status, Reason: o.reason, Message: o.message})
	}
	if s.deleting {
		return
	}
	waitingFor := ""
	for _, c := range lifecycle {
		o, ok := s.observed[c.conditionType]
		switch {
		case ok:
		case c.optional:
			continue
		case waitingFor != "" && !s.failed:
			o = observation{status: metav1.ConditionFalse, reason: infrav1.WaitingForPreviousReason, message: "waiting for " + waitingFor}
		default:
			continue
		}
		if c.conditionType == infrav1.IPAddressClaimedCondition {
			setIPAddressClaimed(pm, o.status, o.reason, o.message)
		} else {
			conditions.Set(pm, metav1.Condition{Type: c.conditionType, Status: o.status, Reason: o.reason, Message: o.message})
		}
		if waitingFor == "" && o.status != metav1.ConditionTrue {
			waitingFor = c.waitingFor
		}
	}
	types := make(conditions.ForConditionTypes, len(lifecycle))
	var optional conditions.IgnoreTypesIfMissing
	for i, c := range lifecycle {
		types[i] = c.conditionType
		if c.optional {
			optional = append(optional, c.conditionType)
		}
	}
	// The summary cannot fail on a type list without negative polarity.
	_ = conditions.SetSummaryCondition(pm, pm, infrav1.ReadyCondition, types, optional)
}
