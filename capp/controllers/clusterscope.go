package controllers

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// clusterScope is what the phases of one PacketCluster reconcile share.
type clusterScope struct {
	PacketCluster *infrav1.PacketCluster
	// Cluster is nil while CAPI has not labelled the PacketCluster (and may
	// be nil when it is deleted).
	Cluster *clusterv1.Cluster

	// client reaches the cluster's project, set by the first phase that
	// needs the Metal API; source names its credentials for messages.
	client *metal.Client
	source string

	observations
	deleting bool
}

// reasonChanges reports whether the condition's reason, as last written,
// differs from reason: events are emitted on such changes only.
func (s *clusterScope) reasonChanges(conditionType, reason string) bool {
	return conditions.GetReason(s.PacketCluster, conditionType) != reason
}

// clusterOwnedConditions are the conditions the PacketCluster reconciler
// writes: the patch helper lets its values win over concurrent writers'.
var clusterOwnedConditions = []string{
	infrav1.ControlPlaneEndpointReadyCondition,
	infrav1.ReadyCondition,
	infrav1.DeletingCondition,
}

// setConditions derives the PacketCluster's conditions from what the phases
// observed, the one place they are written; after an error, what was not
// observed keeps its last value. Ready summarises ControlPlaneEndpointReady.
// The status then describes the cluster's current generation.
func (s *clusterScope) setConditions() {
	pc := s.PacketCluster
	pc.Status.ObservedGeneration = pc.Generation
	if o, ok := s.observed[infrav1.DeletingCondition]; ok {
		conditions.Set(pc, metav1.Condition{Type: infrav1.DeletingCondition, Status: o.status, Reason: o.reason, Message: o.message})
	}
	if s.deleting {
		return
	}
	if o, ok := s.observed[infrav1.ControlPlaneEndpointReadyCondition]; ok {
		conditions.Set(pc, metav1.Condition{Type: infrav1.ControlPlaneEndpointReadyCondition, Status: o.status, Reason: o.reason, Message: o.message})
	}
	if !conditions.Has(pc, infrav1.ControlPlaneEndpointReadyCondition) {
		return
	}
	// The summary cannot fail on a type list without negative polarity.
	_ = conditions.SetSummaryCondition(pc, pc, infrav1.ReadyCondition,
		conditions.ForConditionTypes{infrav1.ControlPlaneEndpointReadyCondition})
}
