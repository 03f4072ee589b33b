package controllers

import (
	"context"
	"errors"
	"net/netip"

	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
)

// endpointBinding is what a control-plane machine of a cluster whose
// endpoint the provider reserved (vipManager CPEM) adds to its user-data:
// the endpoint's address bound to lo (cloudinit.EndpointBinding), since the
// platform routes the address to the node (reconcileEndpointAddress, then
// the cloud provider) without putting it on an interface. A host the user
// set is left alone: it may be a load balancer, not the node. Other
// machines add nothing. wait, when not nil, is the fact (for
// BootstrapDataRendered) of why the user-data cannot be rendered yet.
func (r *PacketMachineReconciler) endpointBinding(ctx context.Context, s *machineScope, bootstrap []byte) (extra cloudinit.Extra, wait bootstrapFact, err error) {
	if !util.IsControlPlaneMachine(s.Machine) {
		return extra, nil, nil
	}
	pc, err := r.packetCluster(ctx, s)
	if err != nil {
		if serr, ok := errors.AsType[*setupError](err); ok {
			return extra, serr, nil
		}
		return extra, nil, err
	}
	if pc == nil || pc.Spec.VIPManager != infrav1.VIPManagerCPEM || !planEndpoint(pc).reserve {
		return extra, nil, nil
	}
	host := pc.Spec.ControlPlaneEndpoint.Host
	if reservedEndpoint(pc) == "" || host == "" {
		return extra, waitingForClusterEndpoint{cluster: pc.Name}, nil
	}
	// useReservation set the host to the reservation's address.
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return extra, clusterEndpointInvalid{cluster: pc.Name, host: host}, nil
	}
	extra, err = cloudinit.EndpointBinding(addr, cloudinit.InitsCluster(bootstrap))
	if err != nil {
		return extra, bootstrapInvalid{err: err}, nil
	}
	return extra, nil, nil
}

// reservedEndpointChanged lets through the PacketCluster events that change
// what its control-plane machines bind: the reservation recorded, or the
// endpoint's host set or changed.
var reservedEndpointChanged = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return boundEndpointOf(e.Object) != "" },
	UpdateFunc:  func(e event.UpdateEvent) bool { return boundEndpointOf(e.ObjectOld) != boundEndpointOf(e.ObjectNew) },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// boundEndpointOf is what endpointBinding renders from: the reservation and
// the host, or "" while the cluster reserved nothing.
func boundEndpointOf(o client.Object) string {
	pc, ok := o.(*infrav1.PacketCluster)
	if !ok || reservedEndpoint(pc) == "" {
		return ""
	}
	return reservedEndpoint(pc) + " " + pc.Spec.ControlPlaneEndpoint.Host
}
