package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

func TestNotOnlyCounts(t *testing.T) {
	base := func() *v1alpha1.MetalVRFIPPool {
		return &v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{
				Name: "pool", Generation: 1, ResourceVersion: "10",
				Labels: map[string]string{"a": "b"}, Finalizers: []string{v1alpha1.ProtectPoolFinalizer},
			},
			Status: v1alpha1.MetalVRFIPPoolStatus{
				IPAddresses: &v1alpha1.IPAddressesSummary{Total: "254", Free: "254"},
				Conditions:  []metav1.Condition{{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionTrue}},
			},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(p *v1alpha1.MetalVRFIPPool)
		wake   bool
	}{
		{"counts only, as the pool's own refresh writes them", func(p *v1alpha1.MetalVRFIPPool) {
			p.ResourceVersion = "11"
			p.Status.IPAddresses = &v1alpha1.IPAddressesSummary{Total: "254", Free: "200", Used: 54}
		}, false},
		{"spec", func(p *v1alpha1.MetalVRFIPPool) { p.Generation = 2 }, true},
		{"paused annotation", func(p *v1alpha1.MetalVRFIPPool) {
			p.Annotations = map[string]string{"cluster.x-k8s.io/paused": ""}
		}, true},
		{"cluster label", func(p *v1alpha1.MetalVRFIPPool) { p.Labels["cluster.x-k8s.io/cluster-name"] = "c" }, true},
		{"finalizer removed", func(p *v1alpha1.MetalVRFIPPool) { p.Finalizers = nil }, true},
		{"a condition", func(p *v1alpha1.MetalVRFIPPool) { p.Status.Conditions[0].Status = metav1.ConditionFalse }, true},
		{"resolved sources", func(p *v1alpha1.MetalVRFIPPool) {
			p.Status.Resolved = []v1alpha1.ResolvedAddresses{{Address: "10.0.0.0/24"}}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, after := base(), base()
			tc.change(after)
			if got := notOnlyCounts().Update(event.UpdateEvent{ObjectOld: before, ObjectNew: after}); got != tc.wake {
				t.Errorf("the update wakes the pool: %v, want %v", got, tc.wake)
			}
		})
	}
}
