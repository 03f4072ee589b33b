package controllers

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/records"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// TestAReleaseWakesTheClaimsPool: without leader election the replica that
// releases a claim may never have known its address (the other replica
// handed it out, and lost the race to release it): the claims waiting on
// the pool must be woken all the same, or the address stays free while they
// wait. test/chaos's TestWithoutLeaderElection saw that once: one address
// of its small pool free for over a minute, a hundred claims waiting.
func TestAReleaseWakesTheClaimsPool(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, ipamv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	k8s := fake.NewClientBuilder().WithScheme(scheme).Build()
	pool := &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "small"}}
	claim := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gone", UID: "uid", DeletionTimestamp: &metav1.Time{}},
		Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
			APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: pool.Name,
		}},
	}
	// A registry that never handed the claim's address out.
	reg := registry.New(records.New(k8s, k8s, "records", records.Writer{Identity: "this"}), nil, "here")
	rel := newReleases(v1alpha1.MetalVRFIPPoolKind, v1alpha1.GlobalMetalVRFIPPoolKind)
	r := &claimReconciler{client: k8s, reader: k8s, registry: reg, releases: rel}
	if _, err := r.releaseAddress(context.Background(), &claimScope{claim: claim, pool: pool}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-rel.claims:
		if ev.Object.GetNamespace() != "ns" || ev.Object.GetName() != "small" {
			t.Fatalf("woke the claims of %s/%s; want ns/small", ev.Object.GetNamespace(), ev.Object.GetName())
		}
	default:
		t.Fatal("the release woke no claim waiting on the pool")
	}
}
