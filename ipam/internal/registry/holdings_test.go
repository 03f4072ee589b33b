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
