package controllers

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// liveReads counts the reads made past the cache.
type liveReads struct {
	client.Reader
	n int
}

func (r *liveReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.n++
	return r.Reader.Get(ctx, key, obj, opts...)
}

// TestOrphanedByKnownGoneClaim: a claim's deletion event makes its
// IPAddress an orphan without a read of the claim; a claim created again
// under the same name keeps its own IPAddress, and a claim read live
// with the IPAddress's UID is not taken for gone.
func TestOrphanedByKnownGoneClaim(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := ipamv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	poolRef := ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: "pool"}
	claimOf := func(uid types.UID) *ipamv1.IPAddressClaim {
		return &ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c", UID: uid},
			Spec:       ipamv1.IPAddressClaimSpec{PoolRef: poolRef},
		}
	}
	addressOf := func(uid types.UID) *ipamv1.IPAddress {
		return &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: "c", UID: uid,
			}}},
			Spec: ipamv1.IPAddressSpec{ClaimRef: ipamv1.IPAddressClaimReference{Name: "c"}, PoolRef: poolRef, Address: "10.0.0.1"},
		}
	}

	// The claim was deleted: its event came, no read is needed.
	empty := fake.NewClientBuilder().WithScheme(scheme).Build()
	reader := &liveReads{Reader: empty}
	var unbound []registry.Claim
	r := &addressReconciler{client: empty, reader: reader, gone: newGoneClaims(), unbound: func(_ poolref.Key, c registry.Claim) {
		unbound = append(unbound, c)
	}}
	r.addressOfClaim(ctx, claimOf("old"))
	if len(unbound) != 1 || unbound[0].UID != "old" {
		t.Fatalf("the deleted claim, never bound, was handed to the reaper as %v; want once", unbound)
	}
	if orphan, _, err := r.orphaned(ctx, addressOf("old")); err != nil || !orphan {
		t.Fatalf("IPAddress of a deleted claim: orphan %v, err %v; want an orphan", orphan, err)
	}
	if reader.n != 0 {
		t.Errorf("the deleted claim was read %d times live; want none", reader.n)
	}

	// Created again under the same name: its own IPAddress is not an
	// orphan, though the old claim's UID is known gone.
	again := fake.NewClientBuilder().WithScheme(scheme).WithObjects(claimOf("new")).Build()
	r.client, r.reader = again, again
	if orphan, _, err := r.orphaned(ctx, addressOf("new")); err != nil || orphan {
		t.Fatalf("IPAddress of the claim created again: orphan %v, err %v; want it kept", orphan, err)
	}

	// A claim the cache has not seen yet, read live with the IPAddress's
	// UID, is not remembered gone.
	live := &liveReads{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(claimOf("fresh")).Build()}
	r.client, r.reader = empty, live
	for range 2 {
		if orphan, _, err := r.orphaned(ctx, addressOf("fresh")); err != nil || orphan {
			t.Fatalf("IPAddress of a claim missing from the cache: orphan %v, err %v; want it kept", orphan, err)
		}
	}
	if live.n != 2 {
		t.Errorf("the claim missing from the cache was read live %d times in two passes; want 2", live.n)
	}

	// Read live gone on the first pass: the second pass reads nothing.
	gone := &liveReads{Reader: empty}
	r.reader = gone
	for range 2 {
		if orphan, _, err := r.orphaned(ctx, addressOf("deleted-unseen")); err != nil || !orphan {
			t.Fatalf("IPAddress of a claim read gone: orphan %v, err %v; want an orphan", orphan, err)
		}
	}
	if gone.n != 1 {
		t.Errorf("a claim read gone was read live %d times in two passes; want 1", gone.n)
	}
}
