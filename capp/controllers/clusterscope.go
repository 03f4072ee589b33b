package controllers

import (
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
)

// clusterScope is what the phases of one PacketCluster reconcile share.
type clusterScope struct {
	PacketCluster *infrav1.PacketCluster
	// Cluster is nil while CAPI has not labelled the PacketCluster (and may
	// be nil when it is deleted).
	Cluster *clusterv1.Cluster

	// executor reaches the cluster's project, set by the first phase that
	// needs the Metal API; source names its credentials for messages.
	executor *device.Executor
	source   string

	// facts are what the phases observed, for setStatus; run is where
	// they stopped, retry the bookkeeping of failed Metal calls.
	facts    clusterFacts
	run      phaseRun
	retry    retryState
	deleting bool
}
