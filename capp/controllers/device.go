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

// reconcileDevice reads what the platform has of the machine (observe),
// plans the next step from it (device.Plan) and carries out the device's
// own: create it, wait for it, or record why it cannot go on. Once the
// device is active the step is its ports', which reconcilePorts carries
// out. It sets spec.providerID as soon as the device exists.
func (r *PacketMachineReconciler) reconcileDevice(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	if _, result, ok, err := openMetal(s.turn, func(f *setupError) { s.facts.device = f }, func() (*metalAccess, error) { return r.access(ctx, s) }); !ok {
		return result, false, err
	}
	if wait := s.turn.PollWait(); wait > 0 && !endpointPending(s) {
		// The last read said when to look again: the conditions stand.
		return ctrl.Result{RequeueAfter: wait}, false, nil
	}
	if result, ok, err := r.observe(ctx, s); !ok {
		return result, false, err
	}

	s.step = device.Plan(s.spec, s.Device)
	switch step := s.step; {
	case step.OnPorts():
		r.deviceActive(s)
		return ctrl.Result{}, true, nil
	case step.Action == device.Create:
		return r.create(ctx, s)
	case step.Action == device.WaitCreate:
		s.facts.device = s.hold.device
		return ctrl.Result{RequeueAfter: s.hold.retry}, false, nil
	case step.Action == device.WaitDevice:
		return r.provisioning(s)
	case step.Reason == device.ReasonDeviceGone:
		// Making another would give the Machine a new server behind the
		// same providerID.
		s.facts.device = deviceGone{id: device.DeviceID(pm.Spec.ProviderID)}
		return ctrl.Result{}, false, nil
	default:
		return r.deviceFailed(ctx, s, step)
	}
}

// followCreation, deferred by Reconcile, is the one place a machine's
// creation slot (which creationReady takes right before Plan can decide
// Create) is kept or freed, from the device's step and fact. It is kept
// while the device is in creation: seen queued or provisioning (which also
// takes it back after a restart) or just created. It is freed once the
// creation is over or did not happen: the device seen in any other state
// (active, failed, or powered off by its owner, which must not keep a slot
// from the other namespaces),
// gone or not the machine's, a Create step that made none, a deletion that
// found none left (PlanDelete's Done) or left it alone. It is left as it is
// when the reconcile stopped before it knew (held back, paced, a failed
// read or set-up), waits to create (WaitCreate: it may be waiting for a
// slot) or waits for its device to go.
func (r *PacketMachineReconciler) followCreation(s *machineScope) {
	pm := s.PacketMachine
	if s.deleting {
		if _, leftAlone := s.facts.deletion.(deviceLeftAlone); leftAlone || s.step.Action == device.Done {
			r.Creations.Release(pm.UID)
		}
		return
	}
	switch f := s.facts.device.(type) {
	case deviceSeen:
		if device.InCreation(f.state) {
			r.Creations.Hold(pm.UID, client.ObjectKeyFromObject(pm), s.Device.CreatedAt)
			return
		}
	case deviceGone, deviceNotOwned, deviceFailed:
	default:
		if !s.spec.MayCreate {
			return
		}
	}
	r.Creations.Release(pm.UID)
}

// observe reads what the platform has of the machine, once, and builds
// s.spec from what it found: the device (by its ID once known, else, when a
// create may have been asked for, by the machine's tag, so a device whose
// creation was never recorded is adopted), proven the machine's before
// anything else is done with it; with none, what its creation waits for
// (creationReady); with an active one, what its ports need (readPorts).
// false stops the phase with the fact of what failed.
func (r *PacketMachineReconciler) observe(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	s.spec = portsSpec(pm)
	s.spec.ProviderID = pm.Spec.ProviderID
	if pm.Spec.ProviderID != "" || deviceRequested(pm) {
		dev, err := s.access.executor.Find(ctx, device.DeviceID(pm.Spec.ProviderID), r.deviceOwner(ctx, s))
		if nerr, ok := notOwned(err); ok {
			return r.deviceNotOwned(ctx, s, nerr), false, nil
		}
		if err != nil && pm.Spec.ProviderID == "" && projectRefused(err) {
			// Looking for the device lists the project's devices: the
			// project is what the platform refused.
			return r.projectNotFound(s, err), false, nil
		}
		if err != nil {
			return r.metalFailed(ctx, s, func(f metalCallFailed) { s.facts.device = f }, "reading the device", err)
		}
		s.Device = dev
	}
	switch {
	case s.Device != nil:
		if pm.Spec.ProviderID == "" {
			pm.Spec.ProviderID = device.ProviderID(s.Device.ID)
		}
		return r.readPorts(ctx, s)
	case pm.Spec.ProviderID == "":
		return r.creationReady(ctx, s)
	}
	return ctrl.Result{}, true, nil
}

// creationReady finds out whether the device may be created now: its place
// (the Machine's failure domain), the networks' VLANs in that metro, and a
// creation slot, in that order, so that no slot is taken for a device that
// cannot be created. What holds it back is kept in s.hold for WaitCreate.
func (r *PacketMachineReconciler) creationReady(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	place, fderr := placeDevice(pm.Spec, s.access.cluster, machineFailureDomain(s))
	if fderr != nil {
		s.hold = hold{device: fderr, retry: slowPoll}
		return ctrl.Result{}, true, nil
	}
	s.placement = place
	if place.metro != "" {
		_, err := s.access.executor.ResolveVLANs(ctx, place.metro, s.spec)
		if problems := vlanProblems(pm, err); problems != nil {
			f := vlansMissing{problems: problems}
			if place.failureDomain != "" {
				f.failureDomain, f.metro = place.failureDomain, place.metro
			}
			s.spec.VLANsMissing, s.hold = true, hold{device: f, retry: vlanNotFound}
			return ctrl.Result{}, true, nil
		}
		if err != nil {
			return r.metalFailed(ctx, s, func(f metalCallFailed) { s.facts.device = f }, "reading the project's VLANs", err)
		}
	}
	if !r.Creations.Acquire(pm.UID, client.ObjectKeyFromObject(pm)) {
		s.hold = hold{device: waitingForSlot{waiting: r.Creations.Waiting(pm.Namespace)}, retry: slotPoll}
		return ctrl.Result{}, true, nil
	}
	s.spec.MayCreate = true
	return ctrl.Result{}, true, nil
}

// readPorts resolves the VLANs of an active device's ports in its metro and
// reads the newest batch of each port that still lacks some, so that Plan
// can tell a batch in flight from none sent. A device that is not active
// has its ports read once it is. A VLAN the metro lacks is kept in s.hold
// for WaitVLANs; a read that fails is VLANsAttached's, the device being
// active all the same.
func (r *PacketMachineReconciler) readPorts(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	if s.Device.State != device.StateActive {
		return ctrl.Result{}, true, nil
	}
	x := s.access.executor
	spec, err := x.ResolveVLANs(ctx, s.Device.Metro, s.spec)
	if problems := vlanProblems(s.PacketMachine, err); problems != nil {
		s.spec.VLANsMissing, s.hold = true, hold{ports: vlansMissing{problems: problems}, retry: vlanNotFound}
		return ctrl.Result{}, true, nil
	}
	if err != nil {
		r.deviceActive(s)
		return r.metalFailed(ctx, s, func(f metalCallFailed) { s.facts.ports = f }, "reading the project's VLANs", err)
	}
	if err := x.ReadBatches(ctx, spec, s.Device); err != nil {
		r.deviceActive(s)
		return r.metalFailed(ctx, s, func(f metalCallFailed) { s.facts.ports = f }, "reading the ports' VLAN batches", err)
	}
	s.spec = spec
	return ctrl.Result{}, true, nil
}

// deviceActive records an active device: DeviceReady is True.
func (r *PacketMachineReconciler) deviceActive(s *machineScope) {
	s.facts.device = deviceSeen{id: s.Device.ID, state: s.Device.State, active: true}
}

// provisioning records a device in creation, read again when its progress
// says it will be done (see provisioningPoll).
func (r *PacketMachineReconciler) provisioning(s *machineScope) (ctrl.Result, bool, error) {
	dev := s.Device
	s.facts.device = deviceSeen{id: dev.ID, state: dev.State}
	var provisioningFor time.Duration
	if !dev.ProvisioningSince.IsZero() {
		provisioningFor = time.Since(dev.ProvisioningSince)
	}
	return ctrl.Result{RequeueAfter: provisioningPoll(time.Since(dev.CreatedAt), provisioningFor, dev.ProvisioningPercent)}, false, nil
}

// deviceNotOwned reports a device that is not provably the machine's:
// nothing is done with it, and deleting the machine leaves it alone.
func (r *PacketMachineReconciler) deviceNotOwned(ctx context.Context, s *machineScope, nerr *device.NotOwnedError) ctrl.Result {
	pm := s.PacketMachine
	field := fmt.Sprintf("spec.providerID %q", pm.Spec.ProviderID)
	if pm.Spec.ProviderID == "" {
		field = "the device carrying the machine's tag " + deviceTag(pm)
	}
	s.facts.device = deviceNotOwned{field: field, err: nerr}
	warnOnChange(r.Recorder, pm, deviceReady(s.facts.device), "ReadDevice")
	ctrl.LoggerFrom(ctx).Info("Device is not the machine's", "device", nerr.ID, "why", nerr.Why)
	return ctrl.Result{RequeueAfter: slowPoll}
}

// create carries out Create, with the creation slot creationReady took:
// it records that the device is requested (so a restart looks for it by
// its tag instead of creating another), then creates it. The new device is
// read back by the next reconcile before anything else is done with it.
func (r *PacketMachineReconciler) create(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	if !deviceRequested(pm) {
		if done, err := r.markRequested(ctx, pm); !done {
			// Our copy is stale (a newer one is on its way) or the write failed.
			return ctrl.Result{}, false, err
		}
	}
	dev, err := r.createDevice(ctx, s)
	if err != nil {
		return r.createFailed(ctx, s, err)
	}
	s.Device = dev
	pm.Spec.ProviderID = device.ProviderID(dev.ID)
	return r.provisioning(s)
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

// endpointPending reports whether the machine may have to route its
// cluster's endpoint (a control-plane machine of a CPEM cluster whose
// reservation is known) and does not hold it: the cluster's change, or the
// deletion of the holder (which wakes the others), must not wait for the
// device's next poll.
func endpointPending(s *machineScope) bool {
	if reservedEndpoint(s.access.cluster) == "" || !util.IsControlPlaneMachine(s.Machine) {
		return false
	}
	return !conditions.IsTrue(s.PacketMachine, infrav1.ControlPlaneEndpointAssignedCondition) ||
		conditions.GetReason(s.PacketMachine, infrav1.ControlPlaneEndpointAssignedCondition) == infrav1.EndpointAssignedElsewhereReason
}

// createDevice creates the device with the rendered user-data.
func (r *PacketMachineReconciler) createDevice(ctx context.Context, s *machineScope) (*device.Device, error) {
	pm := s.PacketMachine
	access := s.access
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
		return ctrl.Result{RequeueAfter: s.turn.RetryAfter()}, false, nil
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
		return ctrl.Result{RequeueAfter: s.turn.RetryAfter()}, false, nil
	}
	return r.metalFailed(ctx, s, func(f metalCallFailed) { s.facts.device = f }, "creating the device", err)
}

// projectNotFound records a project the platform refused (404, 403) and
// retries with backoff.
func (r *PacketMachineReconciler) projectNotFound(s *machineScope, err error) ctrl.Result {
	s.facts.device = projectUnreachable{project: s.access.project, source: s.access.source, err: err}
	return ctrl.Result{RequeueAfter: s.turn.RetryAfter()}
}

// deviceFailed records a device the platform failed to provision, with the
// platform's newest event as the reason. Nothing is retried: the Machine
// must be replaced.
func (r *PacketMachineReconciler) deviceFailed(ctx context.Context, s *machineScope, step device.Step) (ctrl.Result, bool, error) {
	f := deviceFailed{deleted: step.Reason == device.ReasonDeviceDeleted, message: step.Message}
	if step.Reason == device.ReasonDeviceFailed {
		if events, err := s.access.executor.Events(ctx, s.Device.ID); err == nil {
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
// made it (into, which puts it in the phase's slot) and retries with
// backoff.
func (r *PacketMachineReconciler) metalFailed(ctx context.Context, s *machineScope, into func(metalCallFailed), what string, err error) (ctrl.Result, bool, error) {
	ctrl.LoggerFrom(ctx).Info("Metal API call failed", "call", what, "error", err.Error())
	into(metalCallFailed{what: what, err: err, source: s.access.source})
	return ctrl.Result{RequeueAfter: s.turn.RetryAfter()}, false, nil
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
