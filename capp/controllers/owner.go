package controllers

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
)

// deviceOwner is what the machine's device must be proven to belong to.
func (r *PacketMachineReconciler) deviceOwner(ctx context.Context, s *machineScope) device.Owner {
	pm := s.PacketMachine
	return device.Owner{
		Project: s.access.project, UID: string(pm.UID), Name: machineName(s), Cluster: clusterName(s),
		Namespace: pm.Namespace, Exists: uidExists(ctx, r.Client, pm.Namespace, &infrav1.PacketMachineList{}),
	}
}

// endpointOwner is what the reservation behind pc's endpoint must be
// proven to belong to.
func endpointOwner(ctx context.Context, c client.Reader, pc *infrav1.PacketCluster) device.Owner {
	return device.Owner{
		Project: pc.Spec.ProjectID, UID: string(pc.UID), Cluster: pc.Labels[clusterv1.ClusterNameLabel],
		Namespace: pc.Namespace, Exists: uidExists(ctx, c, pc.Namespace, &infrav1.PacketClusterList{}),
	}
}

// clusterName is the name of the machine's cluster, which its device's
// cluster tag carries.
func clusterName(s *machineScope) string {
	if s.Cluster != nil {
		return s.Cluster.Name
	}
	return s.PacketMachine.Labels[clusterv1.ClusterNameLabel]
}

// machineName is the name of the machine's Machine, the value of upstream
// CAPP's machine tag.
func machineName(s *machineScope) string {
	if s.Machine != nil {
		return s.Machine.Name
	}
	for _, ref := range s.PacketMachine.OwnerReferences {
		if ref.Kind == "Machine" {
			return ref.Name
		}
	}
	return ""
}

// uidExists reports, from the cache, whether an object of list's kind with
// a UID exists in namespace ns. When the cache cannot tell, it says yes:
// ownership is then refused, never granted.
func uidExists(ctx context.Context, c client.Reader, ns string, list client.ObjectList) func(string) bool {
	return func(uid string) bool {
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return true
		}
		errFound := errors.New("found")
		return meta.EachListItem(list, func(o runtime.Object) error {
			if obj, ok := o.(metav1.Object); ok && string(obj.GetUID()) == uid {
				return errFound
			}
			return nil
		}) != nil
	}
}

// notOwned returns the *device.NotOwnedError in err, if any.
func notOwned(err error) (*device.NotOwnedError, bool) {
	return errors.AsType[*device.NotOwnedError](err)
}
