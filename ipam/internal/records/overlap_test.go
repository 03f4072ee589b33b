package records_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"testing"

	"go4.org/netipx"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/records"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// TestTwoWritersOfAMixedVRFNeverOverlap: against a real API server, two
// writers that share nothing but it (two replicas without leader election,
// each its own store and registry, seeded before either allocates) serve at
// once an address pool and a prefix pool (/28s) of one VRF over the same
// 10.9.0.0/26. The addresses reach into the /28s whichever comes first; the
// records' names differ (a prefix's is its first address's), so only the
// check after create keeps them apart: no two records left overlap.
func TestTwoWritersOfAMixedVRFNeverOverlap(t *testing.T) {
	ctx := context.Background()
	env, ns, _ := startStore(ctx, t)
	addresses, prefixes := mixedVRFPools(ctx, t, env, ns, "vrf-1")
	a := seededWriter(ctx, t, env, ns, "replica-a", addresses, prefixes)
	b := seededWriter(ctx, t, env, ns, "replica-b", addresses, prefixes)
	allocateAtOnce(ctx, t, ns, "claim", 24, func(i int) (*registry.Registry, v1alpha1.Pool) {
		if i%3 == 2 {
			return b, prefixes
		}
		return a, addresses
	})
	t.Logf("%d records, none overlapping", noOverlap(ctx, t, env, ns))
}

// TestAWriterThatNeverReadsTheOtherPoolNeverOverlaps: against a real API
// server, the address writer has read the VRF's address pool only (a
// manager sharded by --watch-filter, or one whose informer has not shown it
// the prefix pool yet), so its pools do not tell it that the domain is
// mixed: the domain's marker does. The prefix writer has read both pools
// in even rounds, only its own in odd ones (sharded too). Each round, on a
// VRF of its own, the address pool is in use first (one address: the
// marker says addresses), then one prefix is handed out (its writer turns
// the marker mixed, and its list shows the one address only), then 40
// addresses and 3 prefixes are asked for at once: no two records left
// overlap. Without the marker (Marked never saying mixed) every round
// leaves an address inside a prefix, and so does an address writer that
// reads the marker only before its first record.
func TestAWriterThatNeverReadsTheOtherPoolNeverOverlaps(t *testing.T) {
	ctx := context.Background()
	env, ns, _ := startStore(ctx, t)
	for round := range 6 {
		addresses, prefixes := mixedVRFPools(ctx, t, env, ns, fmt.Sprint("vrf-", round))
		a := seededWriter(ctx, t, env, ns, "shard-a", addresses)
		b := seededWriter(ctx, t, env, ns, "shard-b", prefixes)
		if round%2 == 0 {
			b = seededWriter(ctx, t, env, ns, "replica-b", addresses, prefixes)
		}
		allocateAtOnce(ctx, t, ns, "first", 1, func(int) (*registry.Registry, v1alpha1.Pool) { return a, addresses })
		allocateAtOnce(ctx, t, ns, "second", 1, func(int) (*registry.Registry, v1alpha1.Pool) { return b, prefixes })
		allocateAtOnce(ctx, t, ns, "claim", 43, func(i int) (*registry.Registry, v1alpha1.Pool) {
			if i%14 == 0 {
				return b, prefixes
			}
			return a, addresses
		})
	}
	t.Logf("%d records checked", noOverlap(ctx, t, env, ns))
}

// mixedVRFPools creates an address pool and a prefix pool (/28s) of the VRF
// over the same 10.9.0.0/26, gateway 10.9.0.1, the VRF read.
func mixedVRFPools(ctx context.Context, t *testing.T, env *testenv.Environment, ns, vrf string) (addresses, prefixes *v1alpha1.MetalVRFIPPool) {
	t.Helper()
	pool := func(name string, length *int32) *v1alpha1.MetalVRFIPPool {
		p := &v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vrf + "-" + name},
			Spec: v1alpha1.MetalVRFIPPoolSpec{
				Addresses: []string{"10.9.0.0/26"}, Prefix: ptr.To(int32(26)), Gateway: "10.9.0.1", AllocationPrefixLength: length,
				VRF: &v1alpha1.VRFSource{ID: vrf, CredentialsRef: v1alpha1.SecretReference{Name: "metal"}},
			},
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status.VRF = &v1alpha1.ResolvedVRF{ID: vrf, ProjectID: "project-1"}
		if err := env.Client.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(v1alpha1.MetalVRFIPPoolKind))
		return p
	}
	return pool("addresses", nil), pool("prefixes", ptr.To(int32(28)))
}

// seededWriter is a process of its own over the API server, which has read
// the pools given and seeded their domain.
func seededWriter(ctx context.Context, t *testing.T, env *testenv.Environment, ns, identity string, pools ...v1alpha1.Pool) *registry.Registry {
	t.Helper()
	reg := registry.New(records.New(env.Client, env.Client, ns, records.Writer{Identity: identity}), nil, "here")
	for _, p := range pools {
		if _, err := reg.Stats(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// allocateAtOnce serves n claims at once, named after name, i and their
// pool, claim i by the writer and pool of serve(i); an exhausted pool is no
// failure.
func allocateAtOnce(ctx context.Context, t *testing.T, ns, name string, n int, serve func(i int) (*registry.Registry, v1alpha1.Pool)) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			reg, p := serve(i)
			claim := registry.Claim{NamespacedName: types.NamespacedName{Namespace: ns, Name: fmt.Sprint(name, "-", p.GetName(), "-", i)}, UID: types.UID(fmt.Sprint(name, "-uid-", p.GetName(), "-", i))}
			if _, _, err := reg.Acquire(ctx, p, claim, netip.Addr{}); err != nil && !errors.Is(err, cidr.ErrExhausted) {
				t.Errorf("claim %d: %v", i, err)
			}
		})
	}
	wg.Wait()
}

// noOverlap fails the test when two records of one domain in the namespace
// overlap, and returns how many records there are.
func noOverlap(ctx context.Context, t *testing.T, env *testenv.Environment, ns string) int {
	t.Helper()
	var list coordinationv1.LeaseList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns), client.HasLabels{v1alpha1.AllocationDomainLabel}); err != nil {
		t.Fatal(err)
	}
	spans := map[string][]netipx.IPRange{}
	for _, lease := range list.Items {
		ip := netip.MustParseAddr(lease.Annotations[v1alpha1.AllocationAddressAnnotation])
		span := netipx.IPRangeFrom(ip, ip)
		if v, ok := lease.Annotations[v1alpha1.AllocationPrefixLengthAnnotation]; ok {
			bits, _ := strconv.Atoi(v)
			span = netipx.RangeOfPrefix(netip.PrefixFrom(ip, bits))
		}
		domain := lease.Annotations[v1alpha1.AllocationDomainAnnotation]
		spans[domain] = append(spans[domain], span)
	}
	for domain, s := range spans {
		if i, j, found := cidr.Overlap(s); found {
			t.Errorf("records %s and %s of %s overlap (%d records)", s[i], s[j], domain, len(s))
		}
	}
	return len(list.Items)
}

// TestTheMarkerGoesFromOneLengthToMixed: against a real API server, a
// domain's marker says the span length of the first record that marked it,
// then mixed once a record of another length marked it, and stays so; it is
// no record, and seeding passes it by without a word.
func TestTheMarkerGoesFromOneLengthToMixed(t *testing.T) {
	ctx := context.Background()
	env, ns, store := startStore(ctx, t)
	var skipped []records.Skip
	store.OnSkip(func(s records.Skip) { skipped = append(skipped, s) })
	const domain = "vrf/project-1/vrf-1"
	for i, step := range []struct {
		bits  int
		mixed bool
	}{{0, false}, {0, false}, {28, true}, {0, true}, {28, true}} {
		if mixed, err := store.Mark(ctx, domain, step.bits); err != nil || mixed != step.mixed {
			t.Fatalf("step %d: Mark(/%d) = %v, %v; want %v", i, step.bits, mixed, err, step.mixed)
		}
	}
	var list coordinationv1.LeaseList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns), client.HasLabels{v1alpha1.AllocationMarkerLabel}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Annotations[v1alpha1.AllocationSpansAnnotation] != registry.Mixed ||
		list.Items[0].Annotations[v1alpha1.AllocationDomainAnnotation] != domain {
		t.Fatalf("markers: %v", list.Items)
	}
	if recs, err := store.Records(ctx, domain); err != nil || len(recs) > 0 || len(skipped) > 0 {
		t.Fatalf("Records = %v, %v; skipped %v", recs, err, skipped)
	}
}
