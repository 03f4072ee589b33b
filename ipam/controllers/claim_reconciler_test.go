package controllers

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
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

// TestPoolWakesClaims: the claims waiting on a pool wake when it may serve
// them now, not on every write of its counts.
func TestPoolWakesClaims(t *testing.T) {
	pool := func(change func(p *v1alpha1.MetalVRFIPPool)) *v1alpha1.MetalVRFIPPool {
		p := &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Generation: 1, Annotations: map[string]string{}}}
		change(p)
		return p
	}
	same := func(*v1alpha1.MetalVRFIPPool) {}
	p := poolWakesClaims()
	for _, tc := range []struct {
		name   string
		before func(*v1alpha1.MetalVRFIPPool)
		after  func(*v1alpha1.MetalVRFIPPool)
		want   bool
	}{
		{"counts only", same, func(p *v1alpha1.MetalVRFIPPool) { p.Status.IPAddresses = &v1alpha1.IPAddressesSummary{Used: 1} }, false},
		{"spec", same, func(p *v1alpha1.MetalVRFIPPool) { p.Generation = 2 }, true},
		{"unpaused", func(p *v1alpha1.MetalVRFIPPool) { p.Annotations[clusterv1.PausedAnnotation] = "" }, same, true},
		{"paused", same, func(p *v1alpha1.MetalVRFIPPool) { p.Annotations[clusterv1.PausedAnnotation] = "" }, false},
		{"sources resolved", same, func(p *v1alpha1.MetalVRFIPPool) {
			p.Status.Resolved = []v1alpha1.ResolvedAddresses{{Address: "10.0.0.0/24"}}
		}, true},
		{"taken over", same, func(p *v1alpha1.MetalVRFIPPool) { p.Annotations[v1alpha1.AllocatingClusterAnnotation] = "here" }, true},
		{"handed over", same, func(p *v1alpha1.MetalVRFIPPool) { p.Annotations[v1alpha1.HandoverTokenAnnotation] = "ns/secret" }, true},
	} {
		if got := p.Update(event.UpdateEvent{ObjectOld: pool(tc.before), ObjectNew: pool(tc.after)}); got != tc.want {
			t.Errorf("%s: wakes the pool's claims: %v, want %v", tc.name, got, tc.want)
		}
	}
	if !p.Create(event.CreateEvent{Object: pool(same)}) || !p.Delete(event.DeleteEvent{Object: pool(same)}) {
		t.Error("a pool created or deleted does not wake its claims")
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

// TestInShard: a filtered manager serves the claims of the pools carrying
// its filter, whatever the claims' own labels; a claim's label decides only
// while its pool is missing; an unfiltered manager serves every claim.
func TestInShard(t *testing.T) {
	shard := func(value string) map[string]string {
		if value == "" {
			return nil
		}
		return map[string]string{clusterv1.WatchLabel: value}
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pools := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Labels: shard("a")}},
		&v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "unlabelled"}},
		&v1alpha1.GlobalMetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Name: "shared", Labels: shard("a")}},
	).Build()
	claim := func(kind, pool, label string) *ipamv1.IPAddressClaim {
		return &ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", Labels: shard(label)},
			Spec:       ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: kind, Name: pool}},
		}
	}
	for _, tc := range []struct {
		name, filter string
		claim        *ipamv1.IPAddressClaim
		want         bool
	}{
		{"pool of the shard", "a", claim(v1alpha1.MetalVRFIPPoolKind, "a", "a"), true},
		{"pool of the shard, claim of another", "a", claim(v1alpha1.MetalVRFIPPoolKind, "a", "b"), true},
		{"pool of another shard", "b", claim(v1alpha1.MetalVRFIPPoolKind, "a", "b"), false},
		{"pool of no shard", "a", claim(v1alpha1.MetalVRFIPPoolKind, "unlabelled", "a"), false},
		{"shared global pool, its shard", "a", claim(v1alpha1.GlobalMetalVRFIPPoolKind, "shared", "b"), true},
		{"shared global pool, another shard", "b", claim(v1alpha1.GlobalMetalVRFIPPoolKind, "shared", "b"), false},
		{"missing pool, claim of the shard", "a", claim(v1alpha1.MetalVRFIPPoolKind, "missing", "a"), true},
		{"missing pool, claim of another", "a", claim(v1alpha1.MetalVRFIPPoolKind, "missing", "b"), false},
		{"unfiltered manager", "", claim(v1alpha1.MetalVRFIPPoolKind, "a", "b"), true},
		{"a pool kind not ours", "a", claim("InClusterIPPool", "a", "a"), false},
	} {
		r := &claimReconciler{client: pools, watchFilterValue: tc.filter}
		got, err := r.inShard(context.Background(), tc.claim)
		if err != nil || got != tc.want {
			t.Errorf("%s: in shard %v (%v), want %v", tc.name, got, err, tc.want)
		}
		if ev := r.shardEvents().Create(event.CreateEvent{Object: tc.claim}); ev != tc.want {
			t.Errorf("%s: the claim's event passes: %v, want %v", tc.name, ev, tc.want)
		}
	}
}
