package cidr

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"go4.org/netipx"
)

// benchScenario is a pool with some of its addresses in use. The addresses in
// use are a fixed random sample of the first 65,536 addresses of the pool, so
// the free space is fragmented the way it becomes after months of machines
// coming and going, not one tidy block.
type benchScenario struct {
	name  string
	pool  string // one CIDR, its own subnet, gateway at the second address
	inUse int
}

var benchScenarios = []benchScenario{
	{name: "ipv4_slash16/inuse=0", pool: "10.0.0.0/16", inUse: 0},
	{name: "ipv4_slash16/inuse=1k", pool: "10.0.0.0/16", inUse: 1_000},
	{name: "ipv4_slash16/inuse=10k", pool: "10.0.0.0/16", inUse: 10_000},
	{name: "ipv4_slash16/inuse=60k", pool: "10.0.0.0/16", inUse: 60_000},
	{name: "ipv6_slash64/inuse=10k", pool: "fd00::/64", inUse: 10_000},
}

// setup returns the scenario's space and the addresses in use in it.
func (sc benchScenario) setup(b *testing.B) (*Space, []netip.Addr) {
	b.Helper()
	prefix := netip.MustParsePrefix(sc.pool)
	space := mustSpace(b, SpaceConfig{
		Ranges:  []netipx.IPRange{netipx.RangeOfPrefix(prefix)},
		Subnets: []Subnet{{Prefix: prefix, Gateway: prefix.Addr().Next()}},
	})
	var candidates []netip.Addr
	for a, i := prefix.Addr(), 0; i < 1<<16; a, i = a.Next(), i+1 {
		if space.Contains(a) {
			candidates = append(candidates, a)
		}
	}
	rng := rand.New(rand.NewPCG(1, 1))
	rng.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })
	return space, candidates[:sc.inUse]
}

// BenchmarkNext measures the hot path in steady state: each op is one Next,
// which takes the lowest free address, and one Release of that address, which
// puts it back so that every op sees the same number of addresses in use.
func BenchmarkNext(b *testing.B) {
	for _, sc := range benchScenarios {
		b.Run(sc.name, func(b *testing.B) {
			space, inUse := sc.setup(b)
			alloc := NewAllocator(space)
			alloc.Seed(inUse)
			b.ReportAllocs()
			for b.Loop() {
				addr, err := alloc.Next()
				if err != nil {
					b.Fatal(err)
				}
				if err := alloc.Release(addr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNextNaive is the baseline BenchmarkNext is judged against: the
// obvious implementation that, for every Next, builds the set of free
// addresses from the pool minus the in-use list and takes its lowest address.
// Its Release is removing the address from the in-use list again, so in
// steady state each op is just the rebuild.
func BenchmarkNextNaive(b *testing.B) {
	for _, sc := range benchScenarios {
		b.Run(sc.name, func(b *testing.B) {
			space, inUse := sc.setup(b)
			pool := space.Ranges()
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := naiveLowestFree(pool, inUse); !ok {
					b.Fatal("naive baseline found no free address")
				}
			}
		})
	}
}

func naiveLowestFree(pool []netipx.IPRange, inUse []netip.Addr) (netip.Addr, bool) {
	var builder netipx.IPSetBuilder
	for _, r := range pool {
		builder.AddRange(r)
	}
	for _, a := range inUse {
		builder.Remove(a)
	}
	free, _ := builder.IPSet()
	ranges := free.Ranges()
	if len(ranges) == 0 {
		return netip.Addr{}, false
	}
	return ranges[0].From(), true
}

// BenchmarkSeed measures the one-off cost of a restart: a fresh Allocator
// seeded with every address in use.
func BenchmarkSeed(b *testing.B) {
	sc := benchScenario{name: "ipv4_slash16/inuse=60k", pool: "10.0.0.0/16", inUse: 60_000}
	b.Run(sc.name, func(b *testing.B) {
		space, inUse := sc.setup(b)
		b.ReportAllocs()
		for b.Loop() {
			if out := NewAllocator(space).Seed(inUse); len(out) != 0 {
				b.Fatalf("Seed returned %d addresses out of range", len(out))
			}
		}
	})
}
