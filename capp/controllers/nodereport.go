package controllers

import (
	"context"
	"fmt"
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
	const cond = infrav1.NodeNetworkConfiguredCondition
	if c := conditions.Get(pm, cond); c != nil && c.Status == metav1.ConditionTrue {
		s.observeTrue(cond, c.Reason, c.Message)
		return ctrl.Result{}, true, nil
	}
	if !slices.Contains(s.Device.Tags, deviceTag(pm)) {
		// Only a device this provider created runs its network script; one
		// adopted by its ID after an upgrade from upstream CAPP never reports.
		s.observeTrue(cond, infrav1.NodeReportNotExpectedReason, fmt.Sprintf(
			"device %s was not created by this provider (it lacks the tag %s): its node runs no network script to report", s.Device.ID, deviceTag(pm)))
		return ctrl.Result{}, true, nil
	}
	events, err := s.access.executor.Events(ctx, s.Device.ID)
	if err != nil {
		return r.metalFailed(ctx, s, cond, s.access, "reading the device's events", err)
	}
	report := device.NodeReport(events)
	at := report.At.UTC().Format(time.RFC3339)
	switch report.State {
	case device.UserStateSucceeded:
		nodeReports.WithLabelValues(nodeConfigured).Inc()
		r.Recorder.Eventf(pm, nil, corev1.EventTypeNormal, infrav1.NodeNetworkConfiguredReason, "ConfigureNodeNetwork", "The node of device %s configured its network", s.Device.ID)
		s.observeTrue(cond, infrav1.NodeNetworkConfiguredReason, fmt.Sprintf("the node reported %s at %s", report.Message, at))
		return ctrl.Result{}, true, nil
	case device.UserStateFailed:
		if s.reasonChanges(cond, infrav1.NodeNetworkFailedReason) {
			nodeReports.WithLabelValues(nodeFailed).Inc()
			r.Recorder.Eventf(pm, nil, corev1.EventTypeWarning, infrav1.NodeNetworkFailedReason, "ConfigureNodeNetwork", "The node of device %s reported: %s", s.Device.ID, report.Message)
		}
		s.observeFalse(cond, infrav1.NodeNetworkFailedReason, fmt.Sprintf("the node reported at %s: %s", at, report.Message))
		return ctrl.Result{RequeueAfter: slowPoll}, false, nil
	}
	since := activeSince(pm)
	if waited := time.Since(since); waited > r.NodeReportTimeout {
		if s.reasonChanges(cond, infrav1.TimeoutReason) {
			nodeReports.WithLabelValues(nodeTimeout).Inc()
			r.Recorder.Eventf(pm, nil, corev1.EventTypeWarning, infrav1.TimeoutReason, "ConfigureNodeNetwork", "The node of device %s has not reported its network within %s", s.Device.ID, r.NodeReportTimeout)
		}
		s.observeFalse(cond, infrav1.TimeoutReason, fmt.Sprintf(
			"the node of device %s has not reported its network configuration within %s of the device becoming active (--node-report-timeout)", s.Device.ID, r.NodeReportTimeout))
		return ctrl.Result{RequeueAfter: slowPoll}, false, nil
	}
	msg := fmt.Sprintf("device %s is active; its node has not reported its network configuration yet", s.Device.ID)
	if report.State == device.UserStateRunning {
		msg = fmt.Sprintf("the node of device %s started configuring its network at %s", s.Device.ID, at)
	}
	s.observeFalse(cond, infrav1.WaitingForNodeReason, msg)
	return ctrl.Result{RequeueAfter: reportPoll}, false, nil
}

// activeSince is when the machine's device was first seen active: the last
// transition of DeviceReady to True, as written by an earlier reconcile.
func activeSince(pm *infrav1.PacketMachine) time.Time {
	if c := conditions.Get(pm, infrav1.DeviceReadyCondition); c != nil && c.Status == "True" {
		return c.LastTransitionTime.Time
	}
	return time.Now()
}
