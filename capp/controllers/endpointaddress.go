package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// reconcileEndpointAddress routes the public address the PacketCluster
// reserved as its endpoint (vipManager CPEM) to a control-plane device
// while no device has it: while the control plane is not initialized, to
// the first whose device is active, as upstream CAPP does (the node that
// runs kubeadm init); after, only to one whose node has joined, since a
// joining node reaches the cluster through the endpoint and binds it only
// once joined. That is how the endpoint survives its holder's deletion (a
// KubeadmControlPlane rollout or scale-down deletes the oldest machine
// first): the deletion of its PacketMachine wakes the others
// (controlPlaneSiblings), and they read the reservation again. Other machines skip this phase. Once the
// address was seen routed to this machine's device, the reservation is not
// read again.
func (r *PacketMachineReconciler) reconcileEndpointAddress(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	id := reservedEndpoint(s.access.cluster)
	if id == "" || !util.IsControlPlaneMachine(s.Machine) {
		return ctrl.Result{}, true, nil
	}
	if f, ok := stillTrue(pm, infrav1.ControlPlaneEndpointAssignedCondition); ok && f.reason == infrav1.EndpointAssignedReason {
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
	if controlPlaneInitialized(s.Cluster) && !s.Machine.Status.NodeRef.IsDefined() {
		// Its node joining (the Machine's nodeRef) wakes it; so does this
		// slow look, should another take the address meanwhile.
		s.facts.endpoint = endpointNotRouted{address: ep.Address}
		return ctrl.Result{RequeueAfter: slowPoll}, true, nil
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

// controlPlaneInitialized reports whether Cluster API says the cluster's
// control plane was initialized: a node of it is up.
func controlPlaneInitialized(c *clusterv1.Cluster) bool {
	return c != nil && ptr.Deref(c.Status.Initialization.ControlPlaneInitialized, false)
}

// controlPlaneSiblings maps a deleted control-plane PacketMachine to the
// other control-plane PacketMachines of its cluster: its device may have
// held the endpoint, which then goes to one of them (the platform drops a
// deleted device's routes; KubeadmControlPlane labels the machines it
// makes, these included).
func (r *PacketMachineReconciler) controlPlaneSiblings(ctx context.Context, o client.Object) []reconcile.Request {
	machines := &infrav1.PacketMachineList{}
	if err := r.Client.List(ctx, machines, client.InNamespace(o.GetNamespace()),
		client.MatchingLabels{clusterv1.ClusterNameLabel: o.GetLabels()[clusterv1.ClusterNameLabel]},
		client.HasLabels{clusterv1.MachineControlPlaneLabel}); err != nil {
		return nil
	}
	var requests []reconcile.Request
	for _, m := range machines.Items {
		if m.Name != o.GetName() {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
		}
	}
	return requests
}

// controlPlaneDeleted lets through the deletion of a control-plane
// PacketMachine of a cluster only.
var controlPlaneDeleted = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(event.UpdateEvent) bool { return false },
	DeleteFunc: func(e event.DeleteEvent) bool {
		_, controlPlane := e.Object.GetLabels()[clusterv1.MachineControlPlaneLabel]
		return controlPlane && e.Object.GetLabels()[clusterv1.ClusterNameLabel] != ""
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}
