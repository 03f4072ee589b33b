package controllers

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func TestClusterUnpaused(t *testing.T) {
	running := &clusterv1.Cluster{}
	pausedBySpec := &clusterv1.Cluster{Spec: clusterv1.ClusterSpec{Paused: ptr.To(true)}}
	pausedByAnnotation := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{
		Annotations: map[string]string{clusterv1.PausedAnnotation: ""},
	}}
	p := clusterUnpaused()
	for _, tc := range []struct {
		name string
		got  bool
		want bool
	}{
		{"created running", p.Create(event.CreateEvent{Object: running}), true},
		{"created paused", p.Create(event.CreateEvent{Object: pausedBySpec}), false},
		{"created with the paused annotation", p.Create(event.CreateEvent{Object: pausedByAnnotation}), false},
		{"unpaused in its spec", p.Update(event.UpdateEvent{ObjectOld: pausedBySpec, ObjectNew: running}), true},
		{"paused annotation removed", p.Update(event.UpdateEvent{ObjectOld: pausedByAnnotation, ObjectNew: running}), true},
		{"paused", p.Update(event.UpdateEvent{ObjectOld: running, ObjectNew: pausedBySpec}), false},
		{"still paused, another way", p.Update(event.UpdateEvent{ObjectOld: pausedBySpec, ObjectNew: pausedByAnnotation}), false},
		{"changed while running", p.Update(event.UpdateEvent{ObjectOld: running, ObjectNew: running}), false},
		{"deleted", p.Delete(event.DeleteEvent{Object: pausedBySpec}), true},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: wakes the Cluster's claims: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestIndexClaimCluster(t *testing.T) {
	for _, tc := range []struct {
		name  string
		claim ipamv1.IPAddressClaim
		want  []string
	}{
		{"none", ipamv1.IPAddressClaim{}, nil},
		{"spec.clusterName", ipamv1.IPAddressClaim{Spec: ipamv1.IPAddressClaimSpec{ClusterName: "a"}}, []string{"a"}},
		{"cluster-name label", ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{
			Labels: map[string]string{clusterv1.ClusterNameLabel: "b"},
		}}, []string{"b"}},
		{"spec.clusterName before the label", ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{clusterv1.ClusterNameLabel: "b"}},
			Spec:       ipamv1.IPAddressClaimSpec{ClusterName: "a"},
		}, []string{"a"}},
	} {
		if got := indexClaimCluster(&tc.claim); !slices.Equal(got, tc.want) {
			t.Errorf("%s: indexed under %q, want %q", tc.name, got, tc.want)
		}
	}
}
