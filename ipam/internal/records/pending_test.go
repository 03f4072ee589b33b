package records_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// TestExpireKeepsAConfirmedRecord: against a real API server, a record
// confirmed after it was read is not expired by that read; one not
// confirmed since is. The claim's records and IPAddresses are read live.
func TestExpireKeepsAConfirmedRecord(t *testing.T) {
	ctx := context.Background()
	env, ns, store := startStore(ctx, t)
	pool := poolref.Key{Kind: v1alpha1.MetalVRFIPPoolKind, Namespace: ns, Name: "pool"}
	domain := "pool/" + pool.String()
	claim := registry.Claim{NamespacedName: types.NamespacedName{Namespace: ns, Name: "claim"}, UID: "claim-uid"}
	rec := registry.Record{Address: netip.MustParseAddr("10.9.0.2"), Holder: registry.Holder{Pool: pool, Claim: claim}}
	if err := store.Confirm(ctx, domain, rec); err != nil {
		t.Fatal(err)
	}
	read := func() registry.Record {
		t.Helper()
		got, err := store.ClaimRecords(ctx, domain, claim)
		if err != nil || len(got) != 1 || got[0].Address != rec.Address || got[0].Recorded.IsZero() {
			t.Fatalf("the claim's records: %+v, %v", got, err)
		}
		return got[0]
	}
	stale := read()
	// The creation timestamp has whole seconds: a confirmation a second
	// later is told from it.
	time.Sleep(time.Second)
	if err := store.Confirm(ctx, domain, rec); err != nil {
		t.Fatal(err)
	}
	confirmed := read()
	if !confirmed.Recorded.After(stale.Recorded) {
		t.Fatalf("confirming did not mark the record recorded later: %s, then %s", stale.Recorded, confirmed.Recorded)
	}
	if expired, err := store.Unreserve(ctx, domain, stale); err != nil || expired {
		t.Fatalf("a record confirmed after it was read was expired: %v, %v", expired, err)
	}
	for _, other := range []registry.Claim{
		{NamespacedName: types.NamespacedName{Namespace: ns, Name: "other"}, UID: "other-uid"},
		// An owner reference of another namespace forged with the claim's UID.
		{NamespacedName: types.NamespacedName{Namespace: "forger", Name: claim.Name}, UID: claim.UID},
	} {
		forged := registry.Record{Address: rec.Address, Holder: registry.Holder{Pool: pool, Claim: other}, Recorded: confirmed.Recorded}
		if err := store.Confirm(ctx, domain, forged); !errors.Is(err, registry.ErrTaken) {
			t.Fatalf("claim %s confirmed the record of %s: %v", other.NamespacedName, claim.NamespacedName, err)
		}
		if expired, err := store.Unreserve(ctx, domain, forged); err != nil || expired {
			t.Fatalf("claim %s expired the record of %s: %v, %v", other.NamespacedName, claim.NamespacedName, expired, err)
		}
	}

	address := &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "any-name"},
		Spec: ipamv1.IPAddressSpec{
			ClaimRef: ipamv1.IPAddressClaimReference{Name: claim.Name},
			PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: pool.Kind, Name: pool.Name},
			Address:  "10.9.0.3", Prefix: ptr.To(int32(24)),
		},
	}
	if err := env.Client.Create(ctx, address); err != nil {
		t.Fatal(err)
	}
	if got, err := store.ClaimAddresses(ctx, claim); err != nil || len(got) != 1 || got[0] != netip.MustParseAddr("10.9.0.3") {
		t.Fatalf("the claim's IPAddresses: %v, %v", got, err)
	}

	if expired, err := store.Unreserve(ctx, domain, confirmed); err != nil || !expired {
		t.Fatalf("a record not confirmed since it was read was not expired: %v, %v", expired, err)
	}
	if got, err := store.ClaimRecords(ctx, domain, claim); err != nil || len(got) != 0 {
		t.Fatalf("the claim's records after it expired: %+v, %v", got, err)
	}
}
