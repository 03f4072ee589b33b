package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// reconcileDevice finds the machine's device (by its ID once known, else,
// when a create may have been asked for, by the machine's tag, so a device
// whose creation was never recorded is adopted), proves it is the machine's
// before anything else is done with it, creates it when the platform has
// none, and is done once it is active. It sets spec.providerID as soon as
// the device exists.
func (r *PacketMachineReconciler) reconcileDevice(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	if wait, ok := r.backoff.gate(pm.UID, &s.retry); ok {
		return ctrl.Result{RequeueAfter: wait}, false, nil
	}
	access, err := r.access(ctx, s)
	if err != nil {
		return setupFailed(&s.facts.device, err)
	}
	if wait := r.polls.waiting(pm.UID, false); wait > 0 && !endpointPending(s) {
		// The last read said when to look again: the conditions stand.
		return ctrl.Result{RequeueAfter: wait}, false, nil
	}
	dev, result, err := r.observeDevice(ctx, s)
	if dev == nil {
		return result, false, err
	}
	s.Device = dev
	if pm.Spec.ProviderID == "" {
		pm.Spec.ProviderID = device.ProviderID(dev.ID)
	}

	step := device.Plan(device.Spec{}, dev)
	switch step.Action {
	case device.Done:
		r.Creations.Release(pm.UID)
		s.facts.device = deviceSeen{id: dev.ID, state: dev.State, active: true}
		return ctrl.Result{}, true, nil
	case device.Fail:
		r.Creations.Release(pm.UID)
		return r.deviceFailed(ctx, s, access, step)
	default:
		r.Creations.Hold(pm.UID, client.ObjectKeyFromObject(pm), dev.CreatedAt)
		s.facts.device = deviceSeen{id: dev.ID, state: dev.State}
		return ctrl.Result{RequeueAfter: provisioningPoll(time.Since(dev.CreatedAt))}, false, nil
	}
}

// observeDevice returns the machine's device, proven its own, creating it
// when Plan says the platform has none; nil with the result to return when
// there is none to go on with.
func (r *PacketMachineReconciler) observeDevice(ctx context.Context, s *machineScope) (*device.Device, ctrl.Result, error) {
	pm := s.PacketMachine
	access := s.access
	var dev *device.Device
	if pm.Spec.ProviderID != "" || deviceRequested(pm) {
		var err error
		dev, err = access.executor.Find(ctx, device.DeviceID(pm.Spec.ProviderID), r.deviceOwner(ctx, s))
		if nerr, ok := notOwned(err); ok {
			return nil, r.deviceNotOwned(ctx, s, nerr), nil
		}
		if err != nil && pm.Spec.ProviderID == "" && projectRefused(err) {
			// Looking for the device lists the project's devices: the
			// project is what the platform refused.
			return nil, r.projectNotFound(s, err), nil
		}
		if err != nil {
			result, _, err := r.metalFailed(ctx, s, &s.facts.device, "reading the device", err)
			return nil, result, err
		}
	}
	if dev == nil && pm.Spec.ProviderID != "" {
		// The device this machine had is gone: making another would give the
		// Machine a new server behind the same providerID.
		r.Creations.Release(pm.UID)
		s.facts.device = deviceGone{id: device.DeviceID(pm.Spec.ProviderID)}
		return nil, ctrl.Result{}, nil
	}
	if device.Plan(device.Spec{}, dev).Action == device.Create {
		return r.ensureDevice(ctx, s)
	}
	return dev, ctrl.Result{}, nil
}

// deviceNotOwned reports a device that is not provably the machine's:
// nothing is done with it, and deleting the machine leaves it alone.
func (r *PacketMachineReconciler) deviceNotOwned(ctx context.Context, s *machineScope, nerr *device.NotOwnedError) ctrl.Result {
	pm := s.PacketMachine
	r.Creations.Release(pm.UID)
	field := fmt.Sprintf("spec.providerID %q", pm.Spec.ProviderID)
	if pm.Spec.ProviderID == "" {
		field = "the device carrying the machine's tag " + deviceTag(pm)
	}
	s.facts.device = deviceNotOwned{field: field, err: nerr}
	warnOnChange(r.Recorder, pm, deviceReady(s.facts.device), "ReadDevice")
	ctrl.LoggerFrom(ctx).Info("Device is not the machine's", "device", nerr.ID, "why", nerr.Why)
	return ctrl.Result{RequeueAfter: slowPoll}
}

// ensureDevice creates the device, once its place is known (the Machine's
// failure domain), the networks' VLANs are known to be in its metro and a
// creation slot is free.
func (r *PacketMachineReconciler) ensureDevice(ctx context.Context, s *machineScope) (*device.Device, ctrl.Result, error) {
	pm := s.PacketMachine
	access := s.access
	place, fderr := placeDevice(pm.Spec, access.cluster, machineFailureDomain(s))
	if fderr != nil {
		s.facts.device = fderr
		return nil, ctrl.Result{RequeueAfter: slowPoll}, nil
	}
	s.placement = place
	// A network whose VLAN the metro lacks would leave the device
	// unusable: find out before creating it.
	if place.metro != "" {
		if _, err := access.executor.ResolveVLANs(ctx, place.metro, portsSpec(pm)); err != nil {
			if problems := vlanProblems(pm, err); problems != nil {
				f := vlansMissing{problems: problems}
				if place.failureDomain != "" {
					f.failureDomain, f.metro = place.failureDomain, place.metro
				}
				s.facts.device = f
				return nil, ctrl.Result{RequeueAfter: vlanNotFound}, nil
			}
			result, _, err := r.metalFailed(ctx, s, &s.facts.device, "reading the project's VLANs", err)
			return nil, result, err
		}
	}
	if !r.Creations.Acquire(pm.UID, client.ObjectKeyFromObject(pm)) {
		s.facts.device = waitingForSlot{waiting: r.Creations.Waiting(pm.Namespace)}
		return nil, ctrl.Result{RequeueAfter: slotPoll}, nil
	}
	if !deviceRequested(pm) {
		if done, err := r.markRequested(ctx, pm); !done {
			// Our copy is stale (a newer one is on its way) or the write failed.
			r.Creations.Release(pm.UID)
			return nil, ctrl.Result{}, err
		}
	}
	dev, err := r.createDevice(ctx, s, access)
	if err != nil {
		r.Creations.Release(pm.UID)
		result, _, err := r.createFailed(ctx, s, err)
		return nil, result, err
	}
	return dev, ctrl.Result{}, nil
}

// markRequested records, with an optimistic lock, that the machine's
// device is about to be requested: a success also proves this reconcile
// saw the newest machine, so no create before it went unseen. It patches a
// copy, so what this reconcile changed in memory stays for the deferred
// patch. done is false on a conflict (the newer machine's event brings the
// next reconcile) or an error.
func (r *PacketMachineReconciler) markRequested(ctx context.Context, pm *infrav1.PacketMachine) (done bool, err error) {
	base := pm.DeepCopy()
	marked := pm.DeepCopy()
	if marked.Annotations == nil {
		marked.Annotations = map[string]string{}
	}
	marked.Annotations[infrav1.DeviceRequestedAnnotation] = "true"
	if err := r.Client.Patch(ctx, marked, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return false, fmt.Errorf("recording the device request: %w", err)
	}
	if pm.Annotations == nil {
		pm.Annotations = map[string]string{}
	}
	pm.Annotations[infrav1.DeviceRequestedAnnotation] = "true"
	return true, nil
}

// deviceRequested reports whether a device may have been requested for the
// machine (DeviceRequestedAnnotation).
func deviceRequested(pm *infrav1.PacketMachine) bool {
	_, ok := pm.Annotations[infrav1.DeviceRequestedAnnotation]
	return ok
}

// endpointPending reports whether the machine must route its cluster's
// endpoint (a control-plane machine of a CPEM cluster whose reservation is
// known) and has not yet: the cluster's change must not wait for a poll.
func endpointPending(s *machineScope) bool {
	return reservedEndpoint(s.access.cluster) != "" && util.IsControlPlaneMachine(s.Machine) &&
		!conditions.IsTrue(s.PacketMachine, infrav1.ControlPlaneEndpointAssignedCondition)
}

// createDevice creates the device with the rendered user-data.
func (r *PacketMachineReconciler) createDevice(ctx context.Context, s *machineScope, access *metalAccess) (*device.Device, error) {
	pm := s.PacketMachine
	reservation, err := access.executor.PickReservation(ctx, pm.Spec.HardwareReservationID)
	if err != nil {
		return nil, err
	}
	owner := device.Owner{UID: string(pm.UID), Cluster: clusterName(s), Namespace: pm.Namespace}
	req := metal.DeviceRequest{
		Tag:                   deviceTag(pm),
		Hostname:              pm.Name,
		Plan:                  pm.Spec.DevicePlan(),
		OperatingSystem:       pm.Spec.DeviceOS(),
		BillingCycle:          string(pm.Spec.BillingCycle),
		Metro:                 s.placement.metro,
		Facility:              s.placement.facility,
		HardwareReservationID: reservation,
		IPXEScriptURL:         pm.Spec.IPXEURL,
		SSHKeys:               pm.Spec.SSHKeys,
		Userdata:              string(s.UserData),
		Tags:                  device.Tags(pm.Spec.Tags, owner, util.IsControlPlaneMachine(s.Machine)),
	}
	dev, err := access.executor.Create(ctx, req)
	countStep("create", err)
	if err != nil {
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("Created the device", "device", dev.ID, "state", dev.State)
	r.Recorder.Eventf(pm, nil, corev1.EventTypeNormal, "DeviceCreated", "CreateDevice", "Device %s (plan %s) is %s", dev.ID, pm.Spec.DevicePlan(), dev.State)
	return dev, nil
}

// createFailed records a create the platform refused, naming the field
// the refusal is about where it is known, and retries with backoff.
func (r *PacketMachineReconciler) createFailed(ctx context.Context, s *machineScope, err error) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	if rerr, ok := errors.AsType[*device.ReservationError](err); ok {
		s.facts.device = reservationUnavailable{id: pm.Spec.HardwareReservationID, err: rerr}
		return ctrl.Result{RequeueAfter: r.retryAfter(s)}, false, nil
	}
	if projectRefused(err) {
		return r.projectNotFound(s, err), false, nil
	}
	if metal.IsUnprocessable(err) {
		s.facts.device = createRefused{
			plan: pm.Spec.DevicePlan(), os: pm.Spec.DeviceOS(), metro: s.placement.metro, facility: s.placement.facility,
			reservation: pm.Spec.HardwareReservationID, messages: metal.ErrorMessages(err),
		}
		warnOnChange(r.Recorder, pm, deviceReady(s.facts.device), "CreateDevice")
		return ctrl.Result{RequeueAfter: r.retryAfter(s)}, false, nil
	}
	return r.metalFailed(ctx, s, &s.facts.device, "creating the device", err)
}

// projectNotFound records a project the platform refused (404, 403) and
// retries with backoff.
func (r *PacketMachineReconciler) projectNotFound(s *machineScope, err error) ctrl.Result {
	s.facts.device = projectUnreachable{project: s.access.project, source: s.access.source, err: err}
	return ctrl.Result{RequeueAfter: r.retryAfter(s)}
}

// deviceFailed records a device the platform failed to provision, with the
// platform's newest event as the reason. Nothing is retried: the Machine
// must be replaced.
func (r *PacketMachineReconciler) deviceFailed(ctx context.Context, s *machineScope, access *metalAccess, step device.Step) (ctrl.Result, bool, error) {
	f := deviceFailed{deleted: step.Reason == device.ReasonDeviceDeleted, message: step.Message}
	if step.Reason == device.ReasonDeviceFailed {
		if events, err := access.executor.Events(ctx, s.Device.ID); err == nil {
			f.platformReason = device.PlatformReason(events)
		}
	}
	s.facts.device = f
	warnOnChange(r.Recorder, s.PacketMachine, deviceReady(f), "ProvisionDevice")
	return ctrl.Result{}, false, nil
}

// access returns the scope's Metal access, reading it once per reconcile.
func (r *PacketMachineReconciler) access(ctx context.Context, s *machineScope) (*metalAccess, error) {
	if s.access == nil {
		a, err := r.metalFor(ctx, s)
		if err != nil {
			return nil, err
		}
		s.access = a
	}
	return s.access, nil
}

// metalFailed records a failed Metal call as the fact of the phase that
// made it and retries with backoff.
func (r *PacketMachineReconciler) metalFailed(ctx context.Context, s *machineScope, into *fact, what string, err error) (ctrl.Result, bool, error) {
	ctrl.LoggerFrom(ctx).Info("Metal API call failed", "call", what, "error", err.Error())
	*into = metalCallFailed{what: what, err: err, source: s.access.source}
	return ctrl.Result{RequeueAfter: r.retryAfter(s)}, false, nil
}

// machineFailureDomain is the failure domain the Machine is placed in
// (KubeadmControlPlane and MachineDeployments set it).
func machineFailureDomain(s *machineScope) string {
	if s.Machine == nil {
		return ""
	}
	return s.Machine.Spec.FailureDomain
}

// deviceTag identifies the machine's device: exactly one device of the
// project carries it.
func deviceTag(pm *infrav1.PacketMachine) string { return device.MachineTagPrefix + string(pm.UID) }

func firstOf(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// projectRefused reports whether listing a project's devices failed for the
// project: it does not exist (404) or the token may not see it (403). A
// token the API does not know at all is 401, the credentials' problem.
func projectRefused(err error) bool {
	apiErr, ok := errors.AsType[*metal.APIError](err)
	return ok && (apiErr.StatusCode == http.StatusNotFound || apiErr.StatusCode == http.StatusForbidden)
}

// retryAfter records a failed Metal call of the machine and returns how long
// to wait before the next.
func (r *PacketMachineReconciler) retryAfter(s *machineScope) time.Duration {
	return r.backoff.failed(s.PacketMachine.UID, &s.retry)
}
