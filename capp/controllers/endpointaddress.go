package controllers

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// reconcileEndpointAddress routes the public address the PacketCluster
// reserved as its endpoint (vipManager CPEM) to the first control-plane
// device that is active while no device has it, as upstream CAPP does; from
// then on the cloud provider in the workload cluster moves it between
// healthy control-plane nodes. Other machines skip this phase. Once the
// address was seen routed, the reservation is not read again.
func (r *PacketMachineReconciler) reconcileEndpointAddress(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	const cond = infrav1.ControlPlaneEndpointAssignedCondition
	id := reservedEndpoint(s.access.cluster)
	if id == "" || !util.IsControlPlaneMachine(s.Machine) {
		return ctrl.Result{}, true, nil
	}
	if c := conditions.Get(pm, cond); c != nil && c.Status == "True" {
		s.observeTrue(cond, c.Reason, c.Message)
		return ctrl.Result{}, true, nil
	}
	x := s.access.executor
	ep, err := x.ReadEndpoint(ctx, id, endpointOwner(ctx, r.Client, s.access.cluster))
	if nerr, ok := notOwned(err); ok {
		msg := fmt.Sprintf("PacketCluster %s metadata.annotations[%s] %q: %v; it is not routed to the device",
			s.access.cluster.Name, infrav1.EndpointReservationAnnotation, id, nerr)
		if s.reasonChanges(cond, infrav1.EndpointReservationNotOwnedReason) {
			r.Recorder.Eventf(pm, nil, corev1.EventTypeWarning, infrav1.EndpointReservationNotOwnedReason, "AssignEndpoint", "%s", msg)
		}
		s.observeFalse(cond, infrav1.EndpointReservationNotOwnedReason, msg)
		return ctrl.Result{RequeueAfter: slowPoll}, false, nil
	}
	if err != nil {
		return r.metalFailed(ctx, s, cond, s.access, "reading the endpoint's reservation "+id, err)
	}
	switch device.PlanEndpoint(ep, s.Device.ID) {
	case device.EndpointHere:
		s.observeTrue(cond, infrav1.EndpointAssignedReason, fmt.Sprintf("the endpoint %s is routed to device %s", ep.Address, s.Device.ID))
		return ctrl.Result{}, true, nil
	case device.EndpointElsewhere:
		s.observeTrue(cond, infrav1.EndpointAssignedElsewhereReason, fmt.Sprintf(
			"the endpoint %s is routed to device %s; the cloud provider moves it between control-plane nodes",
			ep.Address, strings.Join(ep.AssignedTo, ", ")))
		return ctrl.Result{}, true, nil
	}
	err = x.AssignEndpoint(ctx, ep, s.Device.ID)
	countEndpointStep("assign", err)
	switch {
	case metal.IsUnprocessable(err):
		// Another machine may have been faster; the next read tells.
		msg := fmt.Sprintf("the platform refused to route the endpoint %s to device %s: %s",
			ep.Address, s.Device.ID, strings.Join(metal.ErrorMessages(err), "; "))
		if s.reasonChanges(cond, infrav1.EndpointAssignRefusedReason) {
			r.Recorder.Eventf(pm, nil, corev1.EventTypeWarning, infrav1.EndpointAssignRefusedReason, "AssignEndpoint", "%s", msg)
		}
		s.observeFalse(cond, infrav1.EndpointAssignRefusedReason, msg)
		return ctrl.Result{RequeueAfter: r.retryAfter(s)}, false, nil
	case err != nil:
		return r.metalFailed(ctx, s, cond, s.access, "routing the endpoint "+ep.Address+" to the device", err)
	}
	r.Recorder.Eventf(pm, nil, corev1.EventTypeNormal, infrav1.EndpointAssignedReason, "AssignEndpoint",
		"Routed the cluster's endpoint %s to device %s", ep.Address, s.Device.ID)
	s.observeTrue(cond, infrav1.EndpointAssignedReason, fmt.Sprintf("the endpoint %s is routed to device %s", ep.Address, s.Device.ID))
	return ctrl.Result{}, true, nil
}

// reservedEndpoint is the ID of the public address reservation behind the
// cluster's endpoint, or "" when the provider reserved none (yet).
func reservedEndpoint(pc *infrav1.PacketCluster) string {
	if pc == nil || pc.Spec.VIPManager != infrav1.VIPManagerCPEM {
		return ""
	}
	id := pc.Annotations[infrav1.EndpointReservationAnnotation]
	if id == infrav1.EndpointReservationPending {
		return ""
	}
	return id
}
