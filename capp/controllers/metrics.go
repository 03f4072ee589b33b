package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// deviceCreationsInFlight is how many machines hold a creation slot:
	// devices created and not yet active or failed.
	deviceCreationsInFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "capp_device_creations_in_flight",
		Help: "Devices the manager has created that are not active or failed yet (at most --max-device-creations, more after a restart).",
	})
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
)

func init() {
	metrics.Registry.MustRegister(deviceCreationsInFlight, deviceSteps, endpointSteps)
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
