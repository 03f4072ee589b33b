package controllers

import (
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/internal/pacing"
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
	// they stopped; turn is the reconcile at the cluster's Metal gate.
	facts    clusterFacts
	run      phaseRun
	turn     *pacing.Turn
	deleting bool
}
