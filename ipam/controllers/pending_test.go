package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

func TestPendingByPool(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 4, 0, 0, 0, time.UTC)
	claim := func(ns, group, kind, pool string, created time.Time, edit func(*ipamv1.IPAddressClaim)) ipamv1.IPAddressClaim {
		c := ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pool + "-claim", CreationTimestamp: metav1.NewTime(created)},
			Spec:       ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{APIGroup: group, Kind: kind, Name: pool}},
		}
		if edit != nil {
			edit(&c)
		}
		return c
	}
	group := v1alpha1.GroupVersion.Group
	bound := func(c *ipamv1.IPAddressClaim) { c.Status.AddressRef.Name = "address" }
	deleting := func(c *ipamv1.IPAddressClaim) { c.DeletionTimestamp = &metav1.Time{Time: t0} }
	got := pendingByPool([]ipamv1.IPAddressClaim{
		claim("a", group, v1alpha1.MetalVRFIPPoolKind, "nodes", t0.Add(time.Minute), nil),
		claim("a", group, v1alpha1.MetalVRFIPPoolKind, "nodes", t0, nil),
		claim("a", group, v1alpha1.MetalVRFIPPoolKind, "nodes", t0.Add(-time.Hour), bound),
		claim("a", group, v1alpha1.MetalVRFIPPoolKind, "nodes", t0.Add(-time.Hour), deleting),
		// The same pool name in another namespace is another pool.
		claim("b", group, v1alpha1.MetalVRFIPPoolKind, "nodes", t0.Add(2*time.Minute), nil),
		// A global pool is one for claims of every namespace.
		claim("a", group, v1alpha1.GlobalMetalVRFIPPoolKind, "shared", t0.Add(3*time.Minute), nil),
		claim("b", group, v1alpha1.GlobalMetalVRFIPPoolKind, "shared", t0.Add(4*time.Minute), nil),
		// Another provider's pools are not ours to report.
		claim("a", "ipam.example.com", "InClusterIPPool", "nodes", t0, nil),
		// The in-cluster provider's pools are reported under their
		// companions (the collector's inShard leaves out those not adopted).
		claim("a", group, v1alpha1.InClusterIPPoolKind, "nodes", t0.Add(5*time.Minute), nil),
		claim("b", group, v1alpha1.GlobalInClusterIPPoolKind, "shared", t0.Add(6*time.Minute), nil),
		claim("c", group, v1alpha1.GlobalInClusterIPPoolKind, "shared", t0.Add(7*time.Minute), nil),
	})
	want := map[poolref.Key]pending{
		{Kind: v1alpha1.MetalVRFIPPoolKind, Namespace: "a", Name: "nodes"}:           {count: 2, oldest: t0},
		{Kind: v1alpha1.MetalVRFIPPoolKind, Namespace: "b", Name: "nodes"}:           {count: 1, oldest: t0.Add(2 * time.Minute)},
		{Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: "shared"}:                    {count: 2, oldest: t0.Add(3 * time.Minute)},
		{Kind: v1alpha1.MetalVRFIPPoolKind, Namespace: "a", Name: "incluster-nodes"}: {count: 1, oldest: t0.Add(5 * time.Minute)},
		{Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: "incluster-shared"}:          {count: 2, oldest: t0.Add(6 * time.Minute)},
	}
	if len(got) != len(want) {
		t.Errorf("pending in %d pools, want %d: %v", len(got), len(want), got)
	}
	for key, w := range want {
		if g := got[key]; g.count != w.count || !g.oldest.Equal(w.oldest) {
			t.Errorf("%s: %d pending, oldest created %s; want %d, %s", key, g.count, g.oldest, w.count, w.oldest)
		}
	}
}
