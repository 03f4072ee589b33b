package controllers

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// This file derives a PacketMachine's conditions and status fields from the
// facts its phases recorded (facts.go): pure functions, the one place the
// condition reasons and messages users see are decided.

// lifecycle are the conditions of a machine's phases, in their order, each
// derived from its fact (false when its phase recorded none), and what a
// machine waits for while it is not True.
var lifecycle = []struct {
	conditionType string
	derive        func(*machineFacts) (metav1.Condition, bool)
	waitingFor    string
	// optional conditions apply to some machines only: they appear once
	// their phase observed them, never as waiting.
	optional bool
}{
	{infrav1.IPAddressClaimedCondition, func(f *machineFacts) (metav1.Condition, bool) { return derived(f.claims, ipAddressClaimed) },
		"the networks' addresses (IPAddressClaimed)", false},
	{infrav1.BootstrapDataRenderedCondition, func(f *machineFacts) (metav1.Condition, bool) { return derived(f.bootstrap, bootstrapDataRendered) },
		"the user-data (BootstrapDataRendered)", false},
	{infrav1.DeviceReadyCondition, func(f *machineFacts) (metav1.Condition, bool) { return derived(f.device, deviceReady) },
		"the device (DeviceReady)", false},
	{infrav1.VLANsAttachedCondition, func(f *machineFacts) (metav1.Condition, bool) { return derived(f.ports, vlansAttachedCondition) },
		"the VLANs (VLANsAttached)", false},
	{infrav1.ControlPlaneEndpointAssignedCondition, func(f *machineFacts) (metav1.Condition, bool) { return derived(f.endpoint, endpointAssigned) },
		"the endpoint's address (ControlPlaneEndpointAssigned)", true},
	{infrav1.NodeNetworkConfiguredCondition, func(f *machineFacts) (metav1.Condition, bool) { return derived(f.node, nodeNetworkConfigured) },
		"the node's report (NodeNetworkConfigured)", false},
}

// derived is the condition derive gives for f, false when there is no
// fact.
func derived[F any](f F, derive func(F) metav1.Condition) (metav1.Condition, bool) {
	if any(f) == nil {
		return metav1.Condition{}, false
	}
	return derive(f), true
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

// setStatus derives every condition and status field from the facts, the
// one place they are written. A phase that did not run because an earlier
// one waits says what it waits for; after an error, what was not observed
// keeps its last value. Ready summarises the lifecycle. The status then
// describes the machine's current generation.
func (s *machineScope) setStatus() {
	pm := s.PacketMachine
	pm.Status.ObservedGeneration = pm.Generation
	if s.facts.deletion != nil {
		setCondition(pm, machineDeleting(s.facts.deletion))
	}
	if s.deleting {
		return
	}
	setMachineFields(pm, s.facts, s.Device)
	waitingFor := ""
	for _, c := range lifecycle {
		cond, observed := c.derive(&s.facts)
		switch {
		case observed:
		case c.optional:
			continue
		case waitingFor != "" && !s.run.failed:
			cond = metav1.Condition{Type: c.conditionType, Status: metav1.ConditionFalse,
				Reason: infrav1.WaitingForPreviousReason, Message: "waiting for " + waitingFor}
		default:
			continue
		}
		if c.conditionType == infrav1.IPAddressClaimedCondition {
			setCondition(pm, ipAddressClaimsFulfilled(cond))
		}
		setCondition(pm, cond)
		if waitingFor == "" && cond.Status != metav1.ConditionTrue {
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

// setCondition writes c with its message bounded: it may quote values of
// the spec, claims and the platform.
func setCondition(obj conditions.Setter, c metav1.Condition) {
	c.Message = message.Bound(c.Message)
	conditions.Set(obj, c)
}

// setMachineFields sets the status fields that follow from the facts:
// the addresses (the VLANs', then the device's own), the ports, the
// user-data Secret and whether the machine is provisioned. A field whose
// fact was not observed keeps its last value.
func setMachineFields(pm *infrav1.PacketMachine, f machineFacts, dev *device.Device) {
	bound, claimsKnown := f.claims.(claimsBound)
	if claimsKnown {
		pm.Status.Ports = bound.networks.ports
	}
	switch {
	case dev != nil:
		pm.Status.Addresses = machineAddresses(bound.networks.addresses, dev)
	case claimsKnown && pm.Spec.ProviderID == "":
		// Once the device exists its addresses come with the VLANs'; a
		// reconcile that does not read the device (its reads are paced)
		// keeps that last report.
		pm.Status.Addresses = bound.networks.addresses
	}
	if r, ok := f.bootstrap.(bootstrapRendered); ok {
		pm.Status.UserDataSecretName = r.secret
	}
	if _, ok := f.ports.(vlansAttached); ok {
		pm.Status.Initialization.Provisioned = ptr.To(true)
	}
}

// machineAddresses are the machine's addresses: the VLAN addresses, then
// the device's own (public ones external, private ones internal), then its
// hostname.
func machineAddresses(vlan []clusterv1.MachineAddress, dev *device.Device) []clusterv1.MachineAddress {
	out := slices.Clone(vlan)
	for _, a := range dev.Addresses {
		t := clusterv1.MachineInternalIP
		if a.Public {
			t = clusterv1.MachineExternalIP
		}
		out = append(out, clusterv1.MachineAddress{Type: t, Address: a.Address})
	}
	if h := dev.Hostname; h != "" {
		out = append(out, clusterv1.MachineAddress{Type: clusterv1.MachineHostName, Address: h})
	}
	return out
}

func falseCondition(conditionType, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: conditionType, Status: metav1.ConditionFalse, Reason: reason, Message: msg}
}

func trueCondition(conditionType, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: conditionType, Status: metav1.ConditionTrue, Reason: reason, Message: msg}
}

// commonCondition derives the facts any phase may record; a fact of the
// condition its derivation does not know says so, which the table tests
// catch.
func commonCondition(conditionType string, f any) metav1.Condition {
	switch f := f.(type) {
	case *setupError:
		return falseCondition(conditionType, f.reason, f.message)
	case metalCallFailed:
		return falseCondition(conditionType, metalCallReason(f), metalCallMessage(f))
	case alreadyTrue:
		return trueCondition(conditionType, f.reason, f.message)
	case ipamMissing:
		return falseCondition(conditionType, infrav1.IPAMNotInstalledReason, ipamNotInstalledMessage)
	}
	return metav1.Condition{Type: conditionType, Status: metav1.ConditionUnknown, Reason: "UnknownFact", Message: fmt.Sprintf("%T", f)}
}

func metalCallReason(f metalCallFailed) string {
	switch {
	case metal.IsUnauthorized(f.err):
		return infrav1.InvalidCredentialsReason
	case errors.Is(f.err, device.ErrAmbiguous):
		return infrav1.AmbiguousDeviceReason
	}
	return infrav1.MetalAPIErrorReason
}

// metalCallMessage names the call and the error; the error's text is the
// client's, which never holds the token.
func metalCallMessage(f metalCallFailed) string {
	if metal.IsUnauthorized(f.err) {
		return fmt.Sprintf("%s: the Metal API refused the credentials of %s: %v", f.what, f.source, f.err)
	}
	return fmt.Sprintf("%s: %v (retrying)", f.what, f.err)
}

func (c claimCount) String() string { return fmt.Sprintf("%d/%d bound", c.bound, c.total) }

func ipAddressClaimed(f claimsFact) metav1.Condition {
	const t = infrav1.IPAddressClaimedCondition
	switch f := f.(type) {
	case claimsDeleting:
		return falseCondition(t, infrav1.IPAddressInvalidReason, fmt.Sprintf("%s, IPAddressClaims %s are being deleted while the machine exists: "+
			"their addresses may be handed out again; delete the machine", f.claimCount, strings.Join(f.names, ", ")))
	case claimsWaiting:
		return claimsWaitingCondition(f)
	case addressesUnusable:
		return falseCondition(t, infrav1.IPAddressInvalidReason, fmt.Sprintf("%s, but unusable: %v", f.claimCount, f.err))
	case claimsBound:
		if f.total == 0 {
			return trueCondition(t, infrav1.NoIPAddressClaimsReason, "no network takes its address from a pool")
		}
		return trueCondition(t, infrav1.IPAddressClaimedReason, f.String())
	}
	return commonCondition(t, f)
}

// claimsWaitingCondition says why the claims wait, naming each one's pool.
func claimsWaitingCondition(f claimsWaiting) metav1.Condition {
	reason := infrav1.WaitingForIPAddressReason
	if f.created {
		reason = infrav1.IPAddressClaimsBeingCreatedReason
	}
	parts := make([]string, 0, len(f.claims))
	for _, w := range f.claims {
		part := fmt.Sprintf("IPAddressClaim %s waits on %s", w.name, describePool(w.pool))
		switch {
		case w.refused:
			part += ": " + w.refusal
		case !w.kindServed:
			part += fmt.Sprintf(": the API server serves no kind %s in apiGroup %s, so no IPAM provider answers the claim; fix %s%s",
				message.Quote(w.pool.Kind), message.Quote(ptr.Deref(w.pool.APIGroup, "")), w.path, w.suggestion)
			reason = infrav1.PoolKindNotServedReason
		case !w.answered && w.age >= claimAnswerTimeout:
			part += fmt.Sprintf(": no IPAM provider has answered for %s: is the provider of %s installed and running, and does its watch filter include the claim?",
				w.age.Round(time.Second), message.Quote(w.pool.Kind))
			if reason != infrav1.PoolKindNotServedReason {
				reason = infrav1.NoIPAMProviderAnswerReason
			}
		}
		parts = append(parts, part)
	}
	return falseCondition(infrav1.IPAddressClaimedCondition, reason, fmt.Sprintf("%s; %s", f.claimCount, strings.Join(parts, "; ")))
}

// ipAddressClaimsFulfilled is IPAddressClaimed's v1beta2-style twin, which
// shares its status and message.
func ipAddressClaimsFulfilled(claimed metav1.Condition) metav1.Condition {
	reason := infrav1.IPAddressClaimsFulfilledReason
	switch {
	case claimed.Reason == infrav1.IPAddressInvalidReason || claimed.Reason == infrav1.IPAMNotInstalledReason ||
		claimed.Reason == infrav1.PoolKindNotServedReason || claimed.Reason == infrav1.NoIPAMProviderAnswerReason:
		reason = claimed.Reason
	case claimed.Status != metav1.ConditionTrue:
		reason = infrav1.IPAddressClaimsNotFulfilledReason
	}
	return metav1.Condition{Type: infrav1.IPAddressClaimsFulfilledCondition, Status: claimed.Status, Reason: reason, Message: claimed.Message}
}

func bootstrapDataRendered(f bootstrapFact) metav1.Condition {
	const t = infrav1.BootstrapDataRenderedCondition
	switch f := f.(type) {
	case waitingForBootstrap:
		return falseCondition(t, infrav1.WaitingForBootstrapDataReason, "waiting for the bootstrap provider to set the Machine's bootstrap data")
	case bootstrapInvalid:
		return falseCondition(t, infrav1.BootstrapDataInvalidReason, f.err.Error())
	case vipNetworkMissing:
		return falseCondition(t, infrav1.VIPNetworkMissingReason, fmt.Sprintf("the control-plane machine has no network with vxlan %d "+
			"(PacketCluster %s spec.vip.vxlan) in spec.ports[].networks: kube-vip announces the VIP on its sub-interface", f.vxlan, f.cluster))
	case waitingForClusterVIP:
		return falseCondition(t, infrav1.WaitingForVIPReason, fmt.Sprintf("waiting for PacketCluster %s's VIP (spec.vip) to be bound", f.cluster))
	case clusterVIPInvalid:
		return falseCondition(t, infrav1.BootstrapDataInvalidReason, fmt.Sprintf("PacketCluster %s status.vip: %v", f.cluster, f.err))
	case waitingForClusterEndpoint:
		return falseCondition(t, infrav1.WaitingForControlPlaneEndpointReason, fmt.Sprintf(
			"waiting for PacketCluster %s to reserve its control-plane endpoint (vipManager CPEM), which the user-data binds to the node's lo", f.cluster))
	case clusterEndpointInvalid:
		return falseCondition(t, infrav1.BootstrapDataInvalidReason, fmt.Sprintf(
			"PacketCluster %s spec.controlPlaneEndpoint.host %s is not the IP address of the endpoint it reserved", f.cluster, message.Quote(f.host)))
	case *foreignSecretError:
		return falseCondition(t, infrav1.UserDataSecretConflictReason, f.Error())
	case bootstrapRendered:
		return trueCondition(t, infrav1.BootstrapDataRenderedReason, "")
	}
	return commonCondition(t, f)
}
