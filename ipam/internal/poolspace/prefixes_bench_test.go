package poolspace_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"go4.org/netipx"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
)

// BenchmarkPrefixNext is shared/cidr's BenchmarkNext for prefixes: each op
// takes the lowest free prefix and gives it back, in a pool where inUse
// prefixes, a fixed random sample of its first 65,536, are held, so the
// free prefixes are as fragmented as after months of churn. The cost per
// claim should not grow with inUse.
func BenchmarkPrefixNext(b *testing.B) {
	for _, sc := range []struct {
		name   string
		pool   string
		length int32
		inUse  int
	}{
		{"ipv6_slash48_of_64s/inuse=0", "fd00::/48", 64, 0},
		{"ipv6_slash48_of_64s/inuse=1k", "fd00::/48", 64, 1_000},
		{"ipv6_slash48_of_64s/inuse=10k", "fd00::/48", 64, 10_000},
		{"ipv6_slash48_of_64s/inuse=60k", "fd00::/48", 64, 60_000},
		{"ipv6_slash32_of_64s/inuse=60k", "2001:db8::/32", 64, 60_000},
		{"ipv4_slash8_of_24s/inuse=60k", "10.0.0.0/8", 24, 60_000},
	} {
		b.Run(sc.name, func(b *testing.B) {
			prefix := netip.MustParsePrefix(sc.pool)
			spec := prefixPool(sc.pool, int32(prefix.Bits()), "", sc.length)
			space, errs := poolspace.Resolve(&spec, nil)
			if len(errs) > 0 {
				b.Fatal(errs)
			}
			alloc := poolspace.NewPrefixAllocator(space.Prefixes)
			var candidates []netip.Prefix
			for range 1 << 16 {
				p, err := alloc.Next()
				if err != nil {
					b.Fatal(err)
				}
				candidates = append(candidates, p)
			}
			alloc = poolspace.NewPrefixAllocator(space.Prefixes)
			rng := rand.New(rand.NewPCG(1, 1))
			rng.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })
			for _, p := range candidates[:sc.inUse] {
				if err := alloc.Allocate(p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				p, err := alloc.Next()
				if err != nil {
					b.Fatal(err)
				}
				alloc.Give(netipx.RangeOfPrefix(p))
			}
		})
	}
}
