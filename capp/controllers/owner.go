package controllers

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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

// steadyPoll is how often a machine whose device is done (active, ports
// done, node reported) reads it again, to see it was not deleted outside
// Cluster API.
const steadyPoll = 5 * time.Minute

// pollGate keeps a machine's Metal reads to the pace of what it waits for:
// after a reconcile that read the device and waits (a device provisioning,
// a batch in flight, the node's report), a reconcile that an unrelated
// event brings early (the Machine's or a claim's update, the object's own
// status write) makes no Metal call until the wait is over, and the
// conditions stand. Deletion has waits of its own.
type pollGate struct {
	mu    sync.Mutex
	until map[types.UID]gate
}

type gate struct {
	at       time.Time
	deleting bool
}

func newPollGate() *pollGate { return &pollGate{until: map[types.UID]gate{}} }

// set makes the object wait d before its next Metal read.
func (g *pollGate) set(obj types.UID, d time.Duration, deleting bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.until[obj] = gate{at: time.Now().Add(d), deleting: deleting}
}

// waiting is what is left of the object's wait, 0 when it may read; a wait
// set while not deleting never holds up a deletion.
func (g *pollGate) waiting(obj types.UID, deleting bool) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	w, ok := g.until[obj]
	if !ok || w.deleting != deleting {
		return 0
	}
	return max(time.Until(w.at), 0)
}

// forget drops the object's wait, once it is gone.
func (g *pollGate) forget(obj types.UID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.until, obj)
}
