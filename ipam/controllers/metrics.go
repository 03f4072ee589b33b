package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// allocationsTotal counts what happened to claims, by pool kind and outcome
	// (allocated, released, exhausted, failed).
	allocationsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metal_vrf_ipam_allocations_total",
		Help: "Address allocations and releases by pool kind and outcome.",
	}, []string{"kind", "outcome"})

	// poolAddresses exposes each pool's counts so utilization can be graphed
	// and alerted on. IPv6-sized counts are reported as float64, which is
	// exact up to 2^53 and close enough beyond for a gauge.
	poolAddresses = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "metal_vrf_ipam_pool_addresses",
		Help: "Addresses of a pool by state (total, used, free, out_of_range, retired).",
	}, []string{"kind", "namespace", "name", "state"})

	// recordsReapedTotal counts the records of IPAddresses whose creation
	// failed that were deleted (see registry.Reap), by pool kind.
	recordsReapedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metal_vrf_ipam_reaped_records_total",
		Help: "Allocation records of IPAddresses that were admitted but never created, deleted after the grace period, by pool kind.",
	}, []string{"kind"})

	// seedSkippedTotal counts the objects seeding could not use (see
	// records.Skip), by their kind (IPAddress, Lease) and the reason.
	seedSkippedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metal_vrf_ipam_seed_skipped_objects_total",
		Help: "Objects that seeding an allocation domain could not use as they are and went on without, by kind (IPAddress, Lease) and reason.",
	}, []string{"kind", "reason"})
	// staleFenceRecordsTotal counts the records created past the API
	// server's stale fence (see records.Store.OnStaleFence).
	staleFenceRecordsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "metal_vrf_ipam_stale_fence_records_total",
		Help: "Allocation records the leader created without the API server's fence, which refused them by a stale copy of the leader election Lease.",
	})
)

func init() {
	metrics.Registry.MustRegister(allocationsTotal, poolAddresses, recordsReapedTotal, seedSkippedTotal, staleFenceRecordsTotal)
}
