package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
)

// reconcilePorts carries out the step reconcileDevice planned for the
// active device's ports: a NIC that carries networks is taken out of the
// bond first (hybrid unbonded), then each port gets one batch with all of
// its VLANs, followed until the platform completes it. A port that carries
// its VLANs is left alone, so nothing is sent twice. Once every port is
// done the machine is provisioned.
func (r *PacketMachineReconciler) reconcilePorts(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	step := s.step
	switch step.Action {
	case device.Done:
		s.facts.ports = vlansAttached{spec: s.spec}
		return ctrl.Result{}, true, nil
	case device.WaitVLANs:
		s.facts.ports = s.hold.ports
		return ctrl.Result{RequeueAfter: s.hold.retry}, false, nil
	case device.WaitBatch:
		s.facts.ports = batchInFlight{batch: step.Batch, port: step.Port}
		return ctrl.Result{RequeueAfter: minPoll}, false, nil
	case device.Fail:
		s.facts.ports = portFailed{
			notFound: step.Reason == device.ReasonPortNotFound, index: portIndex(pm, step.Port), port: step.Port, message: step.Message,
		}
		warnOnChange(r.Recorder, pm, vlansAttachedCondition(s.facts.ports), "AttachVLANs")
		return ctrl.Result{}, false, nil
	}

	err := s.access.executor.Run(ctx, step, s.Device)
	countStep(stepName(step.Action), err)
	if err != nil {
		return r.metalFailed(ctx, s, func(f metalCallFailed) { s.facts.ports = f }, fmt.Sprintf("%s on port %s", step.Action, step.Port), err)
	}
	s.facts.ports = portStepSent{disbond: step.Action == device.Disbond, port: step.Port, vlans: step.VLANs}
	if step.Action == device.Disbond {
		r.Recorder.Eventf(pm, nil, corev1.EventTypeNormal, "PortDisbonded", "AttachVLANs", "Took port %s of device %s out of bond0", step.Port, s.Device.ID)
	} else {
		r.Recorder.Eventf(pm, nil, corev1.EventTypeNormal, "VLANsAssigned", "AttachVLANs", "Sent VLANs %s to port %s of device %s in one batch", vxlans(step.VLANs), step.Port, s.Device.ID)
	}
	return ctrl.Result{RequeueAfter: minPoll}, false, nil
}

// portsSpec is what the machine's ports want: every port carries its
// networks' VLANs; a port that is not a bond is a NIC taken out of bond0.
func portsSpec(pm *infrav1.PacketMachine) device.Spec {
	var spec device.Spec
	for _, p := range pm.Spec.Ports {
		ps := device.PortSpec{Name: p.Name, Unbonded: !strings.HasPrefix(p.Name, "bond")}
		for _, n := range p.Networks {
			ps.VLANs = append(ps.VLANs, device.VLAN{ID: n.VLANID, VXLAN: n.VXLAN})
		}
		spec.Ports = append(spec.Ports, ps)
	}
	return spec
}

// vlanProblems are the networks whose VLANs cannot be used, by field; nil
// when err is no *device.VLANError (a failed call).
func vlanProblems(pm *infrav1.PacketMachine, err error) []vlanProblem {
	first, ok := errors.AsType[*device.VLANError](err)
	if !ok {
		return nil
	}
	var problems []vlanProblem
	for _, e := range unwrapAll(err) {
		if verr, ok := errors.AsType[*device.VLANError](e); ok {
			problems = append(problems, vlanProblem{field: networkField(pm, verr.VXLAN, verr.ID), err: verr})
		}
	}
	if len(problems) == 0 {
		problems = append(problems, vlanProblem{err: first})
	}
	return problems
}

func unwrapAll(err error) []error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		return joined.Unwrap()
	}
	return []error{err}
}

// networkField is the spec path of the network with vxlan (and VLAN id).
func networkField(pm *infrav1.PacketMachine, vxlan int32, id string) string {
	for i, p := range pm.Spec.Ports {
		for j, n := range p.Networks {
			if n.VXLAN == vxlan && n.VLANID == id {
				return fmt.Sprintf("spec.ports[%d].networks[%d] (vxlan %d)", i, j, vxlan)
			}
		}
	}
	return fmt.Sprintf("vxlan %d", vxlan)
}

func portIndex(pm *infrav1.PacketMachine, name string) int {
	for i, p := range pm.Spec.Ports {
		if p.Name == name {
			return i
		}
	}
	return -1
}

func vxlans(vlans []device.VLAN) string {
	tags := make([]string, len(vlans))
	for i, v := range vlans {
		tags[i] = fmt.Sprint(v.VXLAN)
	}
	return strings.Join(tags, ", ")
}

func attachedMessage(spec device.Spec) string {
	if len(spec.Ports) == 0 {
		return "the machine has no VLAN networks"
	}
	parts := make([]string, len(spec.Ports))
	for i, p := range spec.Ports {
		parts[i] = fmt.Sprintf("%s: %s", p.Name, vxlans(p.VLANs))
	}
	return strings.Join(parts, "; ")
}

// stepName is a port step's label in capp_device_steps_total.
func stepName(a device.Action) string {
	if a == device.Disbond {
		return "disbond"
	}
	return "assign_vlans"
}
