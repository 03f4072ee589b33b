package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// deviceSteps counts the Metal API steps the machines took, by step:
	// create, disbond, assign_vlans, delete.
	deviceSteps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "capp_device_steps_total",
		Help: "Device steps sent to the Metal API, by step (create, disbond, assign_vlans, delete) and outcome (success, error).",
	}, []string{"step", "outcome"})
	// endpointSteps counts the Metal API steps taken for the clusters'
	// endpoints, by step: reserve, release.
	endpointSteps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "capp_endpoint_reservation_steps_total",
		Help: "Control-plane endpoint reservation steps sent to the Metal API, by step (reserve, release) and outcome (success, error).",
	}, []string{"step", "outcome"})
	// nodeReports counts how the nodes' network configuration ended, once
	// per machine. Every outcome is exported from the start, so the first
	// timeout shows as an increase.
	nodeReports = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "capp_node_reports_total",
		Help: "Nodes' network configuration by outcome, once per machine: configured or failed as the node reported it, timeout when it did not report within --node-report-timeout of its device becoming active.",
	}, []string{"outcome"})
)

// The outcomes of nodeReports.
const (
	nodeConfigured = "configured"
	nodeFailed     = "failed"
	nodeTimeout    = "timeout"
)

func init() {
	for _, outcome := range []string{nodeConfigured, nodeFailed, nodeTimeout} {
		nodeReports.WithLabelValues(outcome)
	}
	metrics.Registry.MustRegister(deviceSteps, endpointSteps, nodeReports)
}

// countStep records a device step sent to the Metal API and how it went.
func countStep(step string, err error) {
	deviceSteps.WithLabelValues(step, outcome(err)).Inc()
}

// countEndpointStep records an endpoint step and how it went.
func countEndpointStep(step string, err error) {
	endpointSteps.WithLabelValues(step, outcome(err)).Inc()
}

func outcome(err error) string {
	if err != nil {
		return "error"
	}
	return "success"
}
