package records_test

import (
	"context"
	"net/netip"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/records"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// TestFreeByName: against a real API server, a claim's release deletes the
// record this process wrote for it by name, reading nothing; a record of
// that address that is no longer the one written for the claim (deleted
// and recorded for another claim by another process, or retired) is kept;
// one confirmed by another process since is still the claim's, and goes.
func TestFreeByName(t *testing.T) {
	ctx := context.Background()
	env := start(t)
	ns, err := env.NewNamespace(ctx, "records")
	if err != nil {
		t.Fatal(err)
	}
	reader := &countingReader{Reader: env.Client, lists: map[string]int{}}
	store := records.New(env.Client, reader, ns, records.Writer{Identity: "leader"})
	other := records.New(env.Client, env.Client, ns, records.Writer{Identity: "other"})
	const domain = "pool/MetalVRFIPPool/default/free"
	pool := poolref.Key{Kind: v1alpha1.MetalVRFIPPoolKind, Namespace: "default", Name: "free"}
	claim := func(name string) registry.Claim {
		return registry.Claim{NamespacedName: types.NamespacedName{Namespace: "default", Name: name}, UID: types.UID(name + "-uid")}
	}
	record := func(ip string, c registry.Claim) registry.Record {
		return registry.Record{Address: netip.MustParseAddr(ip), Holder: registry.Holder{Pool: pool, Claim: c}}
	}
	held := func() map[string]string {
		t.Helper()
		var list coordinationv1.LeaseList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, l := range list.Items {
			out[l.Annotations[v1alpha1.AllocationAddressAnnotation]] = l.Annotations[v1alpha1.AllocationClaimAnnotation]
		}
		return out
	}
	free := func(c registry.Claim, ips ...string) {
		t.Helper()
		var addrs []netip.Addr
		for _, ip := range ips {
			addrs = append(addrs, netip.MustParseAddr(ip))
		}
		if err := store.Free(ctx, c, domain, addrs); err != nil {
			t.Fatal(err)
		}
	}

	// Written here: freed in one delete, no read.
	a := claim("a")
	if err := store.Reserve(ctx, domain, record("10.9.0.1", a)); err != nil {
		t.Fatal(err)
	}
	lists, gets := reader.counts()
	free(a, "10.9.0.1")
	if got := held(); len(got) != 0 {
		t.Fatalf("after a's release the records hold %v; want none", got)
	}
	if l, g := reader.counts(); l != lists || g != gets {
		t.Errorf("freeing a record this process wrote made %d lists and %d gets; want none", l-lists, g-gets)
	}

	// Written here for b, then released elsewhere and recorded for c with
	// the same address: b's release (its memory stale) leaves c's record.
	b, c := claim("b"), claim("c")
	if err := store.Reserve(ctx, domain, record("10.9.0.2", b)); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Unreserve(ctx, domain, record("10.9.0.2", b)); err != nil {
		t.Fatal(err)
	}
	if err := other.Reserve(ctx, domain, record("10.9.0.2", c)); err != nil {
		t.Fatal(err)
	}
	free(b, "10.9.0.2")
	if got := held(); got["10.9.0.2"] != "default/c" {
		t.Fatalf("after b's release the records hold %v; want c's 10.9.0.2, which another process recorded since", got)
	}

	// Retired: kept.
	d := claim("d")
	if err := store.Reserve(ctx, domain, record("10.9.0.3", d)); err != nil {
		t.Fatal(err)
	}
	if err := other.Retire(ctx, domain, record("10.9.0.3", d)); err != nil {
		t.Fatal(err)
	}
	free(d, "10.9.0.3")
	if got := held(); got["10.9.0.3"] != "default/d" {
		t.Fatalf("after d's release the records hold %v; want d's retired 10.9.0.3", got)
	}

	// Confirmed by another process since it was written here: still the
	// claim's, freed after a live read.
	e := claim("e")
	if err := store.Reserve(ctx, domain, record("10.9.0.4", e)); err != nil {
		t.Fatal(err)
	}
	if err := other.Confirm(ctx, domain, record("10.9.0.4", e)); err != nil {
		t.Fatal(err)
	}
	free(e, "10.9.0.4")
	if got := held(); got["10.9.0.4"] != "" {
		t.Fatalf("after e's release the records hold %v; want no record of 10.9.0.4", got)
	}
}
