package controllers

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
)

// reconcileNodeReport follows what the node says of its network
// configuration: the rendered script posts its user state to the metadata
// service, and the platform lists it among the device's events. Once the
// node reported success the events are not read again.
func (r *PacketMachineReconciler) reconcileNodeReport(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	if f, ok := stillTrue(pm, infrav1.NodeNetworkConfiguredCondition); ok {
		s.facts.node = f
		return ctrl.Result{}, true, nil
	}
	if !slices.Contains(s.Device.Tags, deviceTag(pm)) {
		// Only a device this provider created runs its network script; one
		// adopted by its ID after an upgrade from upstream CAPP never reports.
		s.facts.node = nodeReportNotExpected{device: s.Device.ID, tag: deviceTag(pm)}
		return ctrl.Result{}, true, nil
	}
	events, err := s.access.executor.Events(ctx, s.Device.ID)
	if err != nil {
		return r.metalFailed(ctx, s, func(f metalCallFailed) { s.facts.node = f }, "reading the device's events", err)
	}
	f := nodeReported{device: s.Device.ID, report: device.NodeReport(events), timeout: r.NodeReportTimeout}
	activeFor := time.Since(activeSince(pm))
	f.late = activeFor > r.NodeReportTimeout
	s.facts.node = f
	switch {
	case f.report.State == device.UserStateSucceeded:
		nodeReports.WithLabelValues(nodeConfigured).Inc()
		r.Recorder.Eventf(pm, nil, corev1.EventTypeNormal, infrav1.NodeNetworkConfiguredReason, "ConfigureNodeNetwork", "The node of device %s configured its network", s.Device.ID)
		return ctrl.Result{}, true, nil
	case f.report.State == device.UserStateFailed:
		if s.reasonChanges(infrav1.NodeNetworkConfiguredCondition, infrav1.NodeNetworkFailedReason) {
			nodeReports.WithLabelValues(nodeFailed).Inc()
			r.Recorder.Eventf(pm, nil, corev1.EventTypeWarning, infrav1.NodeNetworkFailedReason, "ConfigureNodeNetwork", "The node of device %s reported: %s", s.Device.ID, f.report.Message)
		}
		return ctrl.Result{RequeueAfter: slowPoll}, false, nil
	case f.late:
		if s.reasonChanges(infrav1.NodeNetworkConfiguredCondition, infrav1.TimeoutReason) {
			nodeReports.WithLabelValues(nodeTimeout).Inc()
			r.Recorder.Eventf(pm, nil, corev1.EventTypeWarning, infrav1.TimeoutReason, "ConfigureNodeNetwork", "The node of device %s has not reported its network within %s", s.Device.ID, r.NodeReportTimeout)
		}
		return ctrl.Result{RequeueAfter: slowPoll}, false, nil
	}
	return ctrl.Result{RequeueAfter: nodeReportPoll(activeFor)}, false, nil
}

// stillTrue returns the condition as last written when it is True: a
// phase that need not look again records it as its fact.
func stillTrue(pm *infrav1.PacketMachine, conditionType string) (alreadyTrue, bool) {
	c := conditions.Get(pm, conditionType)
	if c == nil || c.Status != metav1.ConditionTrue {
		return alreadyTrue{}, false
	}
	return alreadyTrue{reason: c.Reason, message: c.Message}, true
}

// activeSince is when the machine's device was first seen active: the last
// transition of DeviceReady to True, as written by an earlier reconcile.
func activeSince(pm *infrav1.PacketMachine) time.Time {
	if c := conditions.Get(pm, infrav1.DeviceReadyCondition); c != nil && c.Status == "True" {
		return c.LastTransitionTime.Time
	}
	return time.Now()
}
