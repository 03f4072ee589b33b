package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// deleteDevice deletes the machine's device and is done only once the
// platform has none: until then the claims stay, so no address is handed
// out while a server may still use it. Whatever fails (credentials, a 429 or
// 5xx storm) keeps the machine here, retried with backoff.
func (r *PacketMachineReconciler) deleteDevice(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	if pm.Spec.ProviderID == "" && !deviceRequested(pm) && !createMayHaveRun(pm) {
		return ctrl.Result{}, true, nil
	}
	// A deletion's wait is set by a reconcile whose calls all succeeded,
	// which cleared the backoff: the two never hold the machine at once.
	if wait := s.turn.PollWait(); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, false, nil
	}
	access, result, ok, err := openMetal(s.turn, func(f *setupError) { s.facts.deletion = f }, func() (*metalAccess, error) { return r.access(ctx, s) })
	if !ok {
		return result, false, err
	}
	dev, err := access.executor.Find(ctx, device.DeviceID(pm.Spec.ProviderID), r.deviceOwner(ctx, s))
	if nerr, ok := notOwned(err); ok {
		// Not the machine's to delete: the machine goes, the device stays.
		r.Recorder.Eventf(pm, nil, corev1.EventTypeWarning, infrav1.DeviceNotOwnedReason, "DeleteDevice",
			"Left device %s alone: %v", nerr.ID, nerr)
		s.facts.deletion = deviceLeftAlone{err: nerr}
		return ctrl.Result{}, true, nil
	}
	switch {
	case err != nil && pm.Spec.ProviderID == "" && metal.IsNotFound(err):
		// Looking for the device by tag lists the project's devices: a
		// project the platform does not know holds none of them.
	case err != nil:
		return r.metalFailed(ctx, s, func(f metalCallFailed) { s.facts.deletion = f }, "reading the device", err)
	}
	s.step = device.PlanDelete(dev)
	switch s.step.Action {
	case device.Done:
		return ctrl.Result{}, true, nil
	case device.Delete:
		err := access.executor.Run(ctx, s.step, dev)
		countStep("delete", err)
		if err != nil {
			return r.metalFailed(ctx, s, func(f metalCallFailed) { s.facts.deletion = f }, "deleting device "+dev.ID, err)
		}
		ctrl.LoggerFrom(ctx).Info("Deleted the device", "device", dev.ID)
		r.Recorder.Eventf(pm, nil, corev1.EventTypeNormal, "DeviceDeleted", "DeleteDevice", "Deleted device %s", dev.ID)
	}
	s.facts.deletion = deviceGoing{id: dev.ID}
	s.turn.PollIn(minPoll)
	return ctrl.Result{RequeueAfter: minPoll}, false, nil
}

// removeFinalizer lets the machine go, once its device and claims are gone;
// the deferred patch writes it.
func (r *PacketMachineReconciler) removeFinalizer(_ context.Context, s *machineScope) (ctrl.Result, bool, error) {
	controllerutil.RemoveFinalizer(s.PacketMachine, infrav1.MachineFinalizer)
	s.turn.Forget()
	return ctrl.Result{}, true, nil
}

// createMayHaveRun reports whether a create call may ever have been made for
// a machine without a providerID. Every reconcile that gets as far as the
// create call leaves DeviceReady with a reason of its own, so a machine whose
// last word on the device is one of those written before that point (or
// none) never had one, and deleting it needs no Metal API: a machine with
// broken credentials, a missing project or VLAN goes at once. Any other
// state (a create that failed with an unknown outcome, say) is looked up.
func createMayHaveRun(pm *infrav1.PacketMachine) bool {
	c := conditions.Get(pm, infrav1.DeviceReadyCondition)
	if c == nil {
		return false
	}
	switch c.Reason {
	case infrav1.WaitingForPreviousReason, infrav1.NoCredentialsReason, infrav1.CredentialsSecretNotFoundReason,
		infrav1.InvalidCredentialsReason, infrav1.InfrastructureNotFoundReason, infrav1.ProjectNotFoundReason, infrav1.VLANNotFoundReason,
		infrav1.WaitingForCreationSlotReason, infrav1.HardwareReservationUnavailableReason:
		return false
	}
	return true
}
