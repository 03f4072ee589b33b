package controllers

import (
	"cmp"
	"context"
	"errors"
	"net/netip"
	"slices"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
)

// kubeVIP is what a control-plane machine of a cluster with a VIP
// (vipManager KUBE_VIP, spec.vip) adds to its user-data: kube-vip's static
// pod, announcing the PacketCluster's VIP on the machine's sub-interface of
// spec.vip.vxlan, with super-admin.conf during kubeadm init where bootstrap
// runs it (cloudinit.NeedsSuperAdmin). Other machines add nothing. wait,
// when not nil, is the fact (for BootstrapDataRendered) of why the
// user-data cannot be rendered yet.
func (r *PacketMachineReconciler) kubeVIP(ctx context.Context, s *machineScope, bootstrap []byte) (extra cloudinit.Extra, wait bootstrapFact, err error) {
	superAdmin := cloudinit.NeedsSuperAdmin(bootstrap, s.Machine.Spec.Version)
	files, wait, err := r.kubeVIPFiles(ctx, s, superAdmin)
	extra.Files = files
	if len(files) > 0 && superAdmin {
		extra.Last = [][]string{cloudinit.KubeVIPRestoreCommand}
	}
	return extra, wait, err
}

func (r *PacketMachineReconciler) kubeVIPFiles(ctx context.Context, s *machineScope, superAdmin bool) (files []cloudinit.File, wait bootstrapFact, err error) {
	if !util.IsControlPlaneMachine(s.Machine) {
		return nil, nil, nil
	}
	pc, err := r.packetCluster(ctx, s)
	if err != nil {
		if serr, ok := errors.AsType[*setupError](err); ok {
			return nil, serr, nil
		}
		return nil, nil, err
	}
	if pc.Spec.VIP == nil || pc.Spec.VIPManager != infrav1.VIPManagerKubeVIP {
		return nil, nil, nil
	}
	vxlan := int(pc.Spec.VIP.VXLAN)
	i := slices.IndexFunc(s.Networks, func(n cloudinit.Network) bool { return n.VLAN == vxlan })
	if i < 0 {
		return nil, vipNetworkMissing{cluster: pc.Name, vxlan: vxlan}, nil
	}
	if pc.Status.VIP == "" {
		return nil, waitingForClusterVIP{cluster: pc.Name}, nil
	}
	vip, err := netip.ParseAddr(pc.Status.VIP)
	if err != nil {
		return nil, clusterVIPInvalid{cluster: pc.Name, err: err}, nil
	}
	n := s.Networks[i]
	f, err := cloudinit.KubeVIPFile(cloudinit.KubeVIP{
		Address: vip,
		// The port's name as Equinix Metal knows it, which is the node's
		// name for bond0; a NIC's may differ on the node.
		Interface:  n.Interface(n.Port),
		Port:       cmp.Or(pc.Spec.ControlPlaneEndpoint.Port, defaultAPIServerPort),
		Image:      cmp.Or(r.KubeVIPImage, cloudinit.DefaultKubeVIPImage),
		SuperAdmin: superAdmin,
	})
	if err != nil {
		return nil, bootstrapInvalid{err: err}, nil
	}
	return []cloudinit.File{f}, nil, nil
}

// packetClusterToMachines maps a PacketCluster to its cluster's
// PacketMachines, whose control-plane user-data carries its VIP or binds
// the endpoint it reserved.
func (r *PacketMachineReconciler) packetClusterToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	cluster := o.GetLabels()[clusterv1.ClusterNameLabel]
	if cluster == "" {
		return nil
	}
	machines := &infrav1.PacketMachineList{}
	if err := r.Client.List(ctx, machines, client.InNamespace(o.GetNamespace()), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
		return nil
	}
	requests := make([]reconcile.Request, len(machines.Items))
	for i, m := range machines.Items {
		requests[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&m)}
	}
	return requests
}

// vipChanged lets through the PacketCluster events that change what its
// control-plane machines render: its VIP set or changed.
var vipChanged = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return vipOf(e.Object) != "" },
	UpdateFunc:  func(e event.UpdateEvent) bool { return vipOf(e.ObjectOld) != vipOf(e.ObjectNew) },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func vipOf(o client.Object) string {
	if pc, ok := o.(*infrav1.PacketCluster); ok {
		return pc.Status.VIP
	}
	return ""
}

// kubeVIPWaitEvent reports a control-plane machine missing the VIP's VLAN
// when the condition turns so: only a new machine can fix it.
func (r *PacketMachineReconciler) kubeVIPWaitEvent(s *machineScope, wait bootstrapFact) {
	if _, ok := wait.(vipNetworkMissing); ok {
		warnOnChange(r.Recorder, s.PacketMachine, bootstrapDataRendered(wait), "RenderUserData")
	}
}
