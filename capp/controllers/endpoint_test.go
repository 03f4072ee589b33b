package controllers

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
)

func TestPlanEndpoint(t *testing.T) {
	tests := []struct {
		name        string
		spec        infrav1.PacketClusterSpec
		annotation  string // the endpoint-reservation annotation, "" for none
		reserve     bool
		vip         bool
		reason      string
		messageHas  string
		wantSuccess bool
	}{
		{name: "CPEM without a host reserves", spec: infrav1.PacketClusterSpec{VIPManager: infrav1.VIPManagerCPEM, Metro: "da"}, reserve: true},
		{name: "no vipManager is CPEM", spec: infrav1.PacketClusterSpec{Metro: "da"}, reserve: true},
		{
			name:   "a host set by the user is used, default port named",
			spec:   infrav1.PacketClusterSpec{Metro: "da", ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "192.0.2.10"}},
			reason: infrav1.ControlPlaneEndpointSetByUserReason, messageHas: "192.0.2.10:6443", wantSuccess: true,
		},
		{
			name:   "KUBE_VIP without a host names the field",
			spec:   infrav1.PacketClusterSpec{VIPManager: infrav1.VIPManagerKubeVIP, Metro: "da"},
			reason: infrav1.ControlPlaneEndpointRequiredReason, messageHas: "spec.controlPlaneEndpoint.host",
		},
		{
			name: "KUBE_VIP with spec.vip claims it, the host it filled in or not",
			spec: infrav1.PacketClusterSpec{VIPManager: infrav1.VIPManagerKubeVIP, VIP: &infrav1.ControlPlaneVIP{VXLAN: 1000},
				ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "10.60.0.200", Port: 6443}},
			vip: true,
		},
		{
			name:   "EMLB without a host names the field",
			spec:   infrav1.PacketClusterSpec{VIPManager: infrav1.VIPManagerEMLB, Metro: "da"},
			reason: infrav1.ControlPlaneEndpointRequiredReason, messageHas: "spec.controlPlaneEndpoint.host",
		},
		{
			name:   "CPEM without a metro names spec.metro",
			spec:   infrav1.PacketClusterSpec{VIPManager: infrav1.VIPManagerCPEM, Facility: "da11"},
			reason: infrav1.MetroRequiredReason, messageHas: "spec.metro",
		},
		{
			name:       "a reservation on record stays the source, host set or not",
			spec:       infrav1.PacketClusterSpec{VIPManager: infrav1.VIPManagerKubeVIP, ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "198.51.100.1", Port: 6443}},
			annotation: "some-id", reserve: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc := &infrav1.PacketCluster{Spec: tt.spec}
			if tt.annotation != "" {
				pc.Annotations = map[string]string{infrav1.EndpointReservationAnnotation: tt.annotation}
			}
			got := planEndpoint(pc)
			var c metav1.Condition
			if got.given != nil {
				c = controlPlaneEndpointReady(got.given)
			}
			if got.reserve != tt.reserve || got.vip != tt.vip || c.Reason != tt.reason || (c.Status == metav1.ConditionTrue) != tt.wantSuccess {
				t.Errorf("planEndpoint = %+v (%+v), want reserve %t vip %t reason %q status %t", got, c, tt.reserve, tt.vip, tt.reason, tt.wantSuccess)
			}
			if !strings.Contains(c.Message, tt.messageHas) {
				t.Errorf("message %q does not name %q", c.Message, tt.messageHas)
			}
		})
	}
}

// The cluster's conditions follow from what its phases observed; Ready
// mirrors ControlPlaneEndpointReady, and a deletion writes only Deleting.
func TestClusterSetConditions(t *testing.T) {
	s := &clusterScope{PacketCluster: &infrav1.PacketCluster{ObjectMeta: metav1.ObjectMeta{Generation: 3}}}
	s.facts.endpoint = endpointMissing{vipManager: infrav1.VIPManagerEMLB}
	s.setStatus()
	if c := conditions.Get(s.PacketCluster, infrav1.ReadyCondition); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Ready = %+v, want False", c)
	}
	if g := s.PacketCluster.Status.ObservedGeneration; g != 3 {
		t.Errorf("status.observedGeneration = %d, want 3", g)
	}

	s.facts = clusterFacts{endpoint: endpointReserved{id: "r"}}
	s.setStatus()
	if c := conditions.Get(s.PacketCluster, infrav1.ReadyCondition); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v, want True", c)
	}

	// After an error nothing was observed: the last values stay.
	s.facts, s.run = clusterFacts{}, phaseRun{failed: true}
	s.setStatus()
	if c := conditions.Get(s.PacketCluster, infrav1.ControlPlaneEndpointReadyCondition); c == nil || c.Reason != infrav1.ControlPlaneEndpointReservedReason {
		t.Errorf("ControlPlaneEndpointReady after an error = %+v, want the last value kept", c)
	}

	s.facts, s.deleting = clusterFacts{deletion: reservationsGoing{ids: []string{"r"}}}, true
	s.setStatus()
	if c := conditions.Get(s.PacketCluster, infrav1.DeletingCondition); c == nil || c.Reason != infrav1.ReleasingEndpointReason {
		t.Errorf("Deleting = %+v", c)
	}

	fresh := &clusterScope{PacketCluster: &infrav1.PacketCluster{}}
	fresh.setStatus()
	if conditions.Has(fresh.PacketCluster, infrav1.ReadyCondition) {
		t.Error("Ready written before anything was observed")
	}
}
