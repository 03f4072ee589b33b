package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/cluster-api/util"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// reconcileEndpointAddress routes the public address the PacketCluster
// reserved as its endpoint (vipManager CPEM) to the first control-plane
// device that is active while no device has it, as upstream CAPP does (CPEM,
// if the workload cluster runs it instead of the flavors' cloud controller
// manager, then moves it between healthy control-plane nodes; ours does
// not). Other machines skip this phase. Once the
// address was seen routed, the reservation is not read again.
func (r *PacketMachineReconciler) reconcileEndpointAddress(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	id := reservedEndpoint(s.access.cluster)
	if id == "" || !util.IsControlPlaneMachine(s.Machine) {
		return ctrl.Result{}, true, nil
	}
	if f, ok := stillTrue(pm, infrav1.ControlPlaneEndpointAssignedCondition); ok {
		s.facts.endpoint = f
		return ctrl.Result{}, true, nil
	}
	x := s.access.executor
	ep, err := x.ReadEndpoint(ctx, id, endpointOwner(ctx, r.Client, s.access.cluster))
	if nerr, ok := notOwned(err); ok {
		s.facts.endpoint = endpointNotOwned{cluster: s.access.cluster.Name, id: id, err: nerr}
		warnOnChange(r.Recorder, pm, endpointAssigned(s.facts.endpoint), "AssignEndpoint")
		return ctrl.Result{RequeueAfter: slowPoll}, false, nil
	}
	if err != nil {
		return r.metalFailed(ctx, s, func(f metalCallFailed) { s.facts.endpoint = f }, "reading the endpoint's reservation "+id, err)
	}
	switch device.PlanEndpoint(ep, s.Device.ID) {
	case device.EndpointHere:
		s.facts.endpoint = endpointRouted{address: ep.Address, device: s.Device.ID}
		return ctrl.Result{}, true, nil
	case device.EndpointElsewhere:
		s.facts.endpoint = endpointRouted{address: ep.Address, device: s.Device.ID, elsewhere: ep.AssignedTo}
		return ctrl.Result{}, true, nil
	}
	err = x.AssignEndpoint(ctx, ep, s.Device.ID)
	countEndpointStep("assign", err)
	switch {
	case metal.IsUnprocessable(err):
		// Another machine may have been faster; the next read tells.
		s.facts.endpoint = endpointAssignRefused{address: ep.Address, device: s.Device.ID, messages: metal.ErrorMessages(err)}
		warnOnChange(r.Recorder, pm, endpointAssigned(s.facts.endpoint), "AssignEndpoint")
		return ctrl.Result{RequeueAfter: s.turn.RetryAfter()}, false, nil
	case err != nil:
		return r.metalFailed(ctx, s, func(f metalCallFailed) { s.facts.endpoint = f }, "routing the endpoint "+ep.Address+" to the device", err)
	}
	r.Recorder.Eventf(pm, nil, corev1.EventTypeNormal, infrav1.EndpointAssignedReason, "AssignEndpoint",
		"Routed the cluster's endpoint %s to device %s", ep.Address, s.Device.ID)
	s.facts.endpoint = endpointRouted{address: ep.Address, device: s.Device.ID}
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
