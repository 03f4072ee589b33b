package controllers

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
)

// This file derives a PacketCluster's conditions and status fields from the
// facts its phases recorded (facts.go), as packetmachine_status.go does for
// machines.

// clusterOwnedConditions are the conditions the PacketCluster reconciler
// writes: the patch helper lets its values win over concurrent writers'.
var clusterOwnedConditions = []string{
	infrav1.ControlPlaneEndpointReadyCondition,
	infrav1.ReadyCondition,
	infrav1.DeletingCondition,
}

// setStatus derives the PacketCluster's conditions and status fields from
// the facts, the one place they are written; after an error, what was not
// observed keeps its last value. Ready summarises ControlPlaneEndpointReady.
// The status then describes the cluster's current generation.
func (s *clusterScope) setStatus() {
	pc := s.PacketCluster
	pc.Status.ObservedGeneration = pc.Generation
	if s.facts.deletion != nil {
		setCondition(pc, clusterDeleting(s.facts.deletion))
	}
	if s.deleting {
		return
	}
	if f := s.facts.endpoint; f != nil {
		setCondition(pc, controlPlaneEndpointReady(f))
		switch f := f.(type) {
		case vipClaimed:
			pc.Status.VIP = f.vip
			pc.Status.Initialization.Provisioned = ptr.To(true)
		case endpointSetByUser, endpointReserved:
			pc.Status.Initialization.Provisioned = ptr.To(true)
		}
	}
	if !conditions.Has(pc, infrav1.ControlPlaneEndpointReadyCondition) {
		return
	}
	// The summary cannot fail on a type list without negative polarity.
	_ = conditions.SetSummaryCondition(pc, pc, infrav1.ReadyCondition,
		conditions.ForConditionTypes{infrav1.ControlPlaneEndpointReadyCondition})
}

func controlPlaneEndpointReady(f clusterEndpointFact) metav1.Condition {
	const t = infrav1.ControlPlaneEndpointReadyCondition
	switch f := f.(type) {
	case endpointSetByUser:
		return trueCondition(t, infrav1.ControlPlaneEndpointSetByUserReason, fmt.Sprintf("spec.controlPlaneEndpoint %s is set by the user", f.endpoint))
	case endpointMissing:
		return endpointMissingCondition(f)
	case reservationGone:
		return falseCondition(t, infrav1.EndpointReservationNotFoundReason, fmt.Sprintf(
			"reservation %s of spec.controlPlaneEndpoint %s is gone from the platform: the address cannot be had back", f.id, f.host))
	case reservationNotOwned:
		return falseCondition(t, infrav1.EndpointReservationNotOwnedReason, fmt.Sprintf(
			"metadata.annotations[%s] %q: %v; the provider neither uses nor releases it", infrav1.EndpointReservationAnnotation, f.id, f.err))
	case reservationRefused:
		return falseCondition(t, infrav1.EndpointReservationRefusedReason, fmt.Sprintf(
			"the platform refused to reserve a public IPv4 address in metro %q (spec.metro): %s", f.metro, strings.Join(f.messages, "; ")))
	case metalCallFailed:
		if projectRefused(f.err) {
			return falseCondition(t, infrav1.ProjectNotFoundReason, fmt.Sprintf("%s: project %s (spec.projectID) does not exist or %s cannot reach it: %v",
				f.what, f.project, f.source, f.err))
		}
	case endpointReserved:
		return trueCondition(t, infrav1.ControlPlaneEndpointReservedReason, fmt.Sprintf(
			"spec.controlPlaneEndpoint %s is public IPv4 reservation %s (%s) in metro %s", f.endpoint, f.id, f.address, f.metro))
	}
	if c, ok := vipCondition(f); ok {
		return c
	}
	return commonCondition(t, f)
}

func endpointMissingCondition(f endpointMissing) metav1.Condition {
	const t = infrav1.ControlPlaneEndpointReadyCondition
	switch f.vipManager {
	case infrav1.VIPManagerKubeVIP:
		return falseCondition(t, infrav1.ControlPlaneEndpointRequiredReason, "vipManager KUBE_VIP does not reserve an address: "+
			"set spec.vip to claim one from an IPAM pool, or spec.controlPlaneEndpoint.host to the address kube-vip announces")
	case infrav1.VIPManagerEMLB:
		return falseCondition(t, infrav1.ControlPlaneEndpointRequiredReason, "vipManager EMLB: the Equinix Metal Load Balancer "+
			"is gone with the platform; set spec.controlPlaneEndpoint.host, or use vipManager CPEM")
	}
	return falseCondition(t, infrav1.MetroRequiredReason, "vipManager CPEM reserves a public IPv4 address in spec.metro, "+
		"which is empty: set spec.metro, or spec.controlPlaneEndpoint.host")
}

// vipCondition derives ControlPlaneEndpointReady from the facts of spec.vip.
func vipCondition(f clusterEndpointFact) (metav1.Condition, bool) {
	const t = infrav1.ControlPlaneEndpointReadyCondition
	switch f := f.(type) {
	case vipClaimDeleting:
		return falseCondition(t, infrav1.VIPAddressInvalidReason, fmt.Sprintf("IPAddressClaim %s is being deleted while the cluster exists: "+
			"its address may be handed out again", f.claim)), true
	case vipWaiting:
		return falseCondition(t, infrav1.WaitingForVIPReason, fmt.Sprintf(
			"waiting for IPAddressClaim %s on %s %s (spec.vip.addressFromPool) to be bound", f.claim, f.kind, f.pool)), true
	case vipNotAnAddress:
		return falseCondition(t, infrav1.VIPAddressInvalidReason, fmt.Sprintf(
			"IPAddress %s bound to IPAddressClaim %s has address %q, which is not an IP address", f.address, f.claim, f.value)), true
	case vipEndpointMismatch:
		return falseCondition(t, infrav1.VIPAddressInvalidReason, fmt.Sprintf("spec.controlPlaneEndpoint.host %s is not VIP %s bound to IPAddressClaim %s: "+
			"the endpoint cannot move; recreate the cluster", f.host, f.vip, f.claim)), true
	case vipClaimed:
		return trueCondition(t, infrav1.VIPClaimedReason, fmt.Sprintf("spec.controlPlaneEndpoint %s is the VIP bound to IPAddressClaim %s on %s %s",
			f.endpoint, f.claim, f.kind, f.pool)), true
	}
	return metav1.Condition{}, false
}

// clusterDeleting is the Deleting condition: True with what the deletion
// waits for.
func clusterDeleting(f clusterDeletionFact) metav1.Condition {
	const t = infrav1.DeletingCondition
	switch f := f.(type) {
	case *setupError:
		return trueCondition(t, infrav1.ReleasingEndpointReason, "cannot release the endpoint's reservation: "+f.message)
	case metalCallFailed:
		return trueCondition(t, infrav1.ReleasingEndpointReason, fmt.Sprintf("%s: %v (retrying)", f.what, f.err))
	case reservationsGoing:
		return trueCondition(t, infrav1.ReleasingEndpointReason, "waiting for reservation "+strings.Join(f.ids, ", ")+" to be gone")
	case vipClaimGoing:
		return trueCondition(t, infrav1.ReleasingVIPReason, "waiting for IPAddressClaim "+f.claim+" to be gone")
	}
	return commonCondition(t, f)
}
