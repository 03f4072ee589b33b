package registry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// The claim index always agrees with a scan of every address in use, through
// any sequence of takes, hand-overs to another holder and removals.
func TestHoldingsIndexAgreesWithAScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := newHoldings()
	claims := []Claim{claimNamed("a", "x"), claimNamed("a", "y"), claimNamed("b", "x")}
	for step := range 5000 {
		ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(16))})
		if rng.IntN(3) == 0 {
			h.remove(ip)
		} else {
			h.set(ip, Holder{Claim: claims[rng.IntN(len(claims))], Retired: rng.IntN(4) == 0})
		}
		for _, c := range claims {
			var scanned []netip.Addr
			for ip, holder := range h.all() {
				if holder.Claim == c {
					scanned = append(scanned, ip)
				}
			}
			got := h.of(c)
			slices.SortFunc(scanned, netip.Addr.Compare)
			slices.SortFunc(got, netip.Addr.Compare)
			if !slices.Equal(got, scanned) {
				t.Fatalf("step %d: the index gives %s %v, a scan %v", step, c.NamespacedName, got, scanned)
			}
		}
		if len(h.byClaim) > len(claims) {
			t.Fatalf("step %d: the index keeps %d claims, some without addresses", step, len(h.byClaim))
		}
	}
}

// freeIsFree is a store whose Free costs nothing, so that
// BenchmarkReleaseInFullDomain measures the registry alone.
type freeIsFree struct{ *memStore }

func (freeIsFree) Free(context.Context, Claim, string, []netip.Addr) error { return nil }

// BenchmarkReleaseInFullDomain releases one claim of a domain that holds
// inUse addresses and acquires its address again: the registry's work per
// release (and per acquisition) under the domain's lock, which should not
// grow with the addresses in use.
func BenchmarkReleaseInFullDomain(b *testing.B) {
	benchmarkReleaseInFullDomain(b, func(pool *v1alpha1.GlobalMetalVRFIPPool) {
		pool.Spec.Addresses, pool.Spec.Prefix, pool.Spec.Gateway = []string{"10.0.0.0/16"}, ptr.To(int32(16)), "10.0.0.1"
	})
}

// BenchmarkReleaseInFullPrefixDomain is BenchmarkReleaseInFullDomain for a
// prefix pool: an IPv6 /32 handing out /64s, inUse of them held.
func BenchmarkReleaseInFullPrefixDomain(b *testing.B) {
	benchmarkReleaseInFullDomain(b, func(pool *v1alpha1.GlobalMetalVRFIPPool) {
		pool.Spec.Addresses, pool.Spec.Prefix, pool.Spec.Gateway = []string{"2001:db8::/32"}, ptr.To(int32(32)), "2001:db8::1"
		pool.Spec.AllocationPrefixLength = ptr.To(int32(64))
	})
}

// benchmarkReleaseInFullDomain runs the release benchmarks on the pool
// space sets.
func benchmarkReleaseInFullDomain(b *testing.B, space func(*v1alpha1.GlobalMetalVRFIPPool)) {
	for _, inUse := range []int{1000, 50000} {
		b.Run(fmt.Sprintf("in-use=%d", inUse), func(b *testing.B) {
			ctx := context.Background()
			reg := New(freeIsFree{newMemStore()}, nil, "here")
			pool := globalPool("here")
			space(pool)
			for i := range inUse {
				if _, _, err := reg.Acquire(ctx, pool, claimNamed("a", fmt.Sprint(i)), netip.Addr{}); err != nil {
					b.Fatal(err)
				}
			}
			key := poolref.KeyOf(pool)
			b.ResetTimer()
			for i := range b.N {
				c := claimNamed("a", fmt.Sprint(i%inUse))
				if _, err := reg.Release(ctx, key, c); err != nil {
					b.Fatal(err)
				}
				if _, _, err := reg.Acquire(ctx, pool, c, netip.Addr{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// freeSeen is a store that notes what each Free is told.
type freeSeen struct {
	*memStore
	domain string
	held   []netip.Addr
}

func (s *freeSeen) Free(ctx context.Context, claim Claim, domain string, held []netip.Addr) error {
	s.domain, s.held = domain, held
	return s.memStore.Free(ctx, claim, domain, held)
}

// TestReleaseTellsTheStoreWhatTheClaimHolds: a release names the domain
// and the addresses the claim holds there, so that the store frees their
// records by name; a claim the registry knows nothing of is searched for.
func TestReleaseTellsTheStoreWhatTheClaimHolds(t *testing.T) {
	ctx := context.Background()
	store := &freeSeen{memStore: newMemStore()}
	reg := New(store, nil, "here")
	pool := globalPool("here")
	pool.Spec.Addresses, pool.Spec.Prefix, pool.Spec.Gateway = []string{"10.0.0.0/24"}, ptr.To(int32(24)), "10.0.0.1"
	held := claimNamed("a", "held")
	ip, _, err := reg.Acquire(ctx, pool, held, netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	key := poolref.KeyOf(pool)
	if _, err := reg.Release(ctx, key, held); err != nil {
		t.Fatal(err)
	}
	if store.domain != DomainOf(pool) || !slices.Equal(store.held, []netip.Addr{ip}) {
		t.Fatalf("Free was told %q %v; want %q [%s]", store.domain, store.held, DomainOf(pool), ip)
	}
	if _, err := reg.Release(ctx, key, claimNamed("a", "unknown")); err != nil {
		t.Fatal(err)
	}
	if len(store.held) != 0 {
		t.Fatalf("Free of a claim holding nothing here was told %v; want nothing, for a search", store.held)
	}
}
