package cidr

import (
	"net/netip"
	"testing"

	"go4.org/netipx"
)

// ip is netip.MustParseAddr, short enough to keep tables readable.
func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func mustRange(tb testing.TB, entry string) netipx.IPRange {
	tb.Helper()
	r, err := ParseEntry(entry)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func mustRanges(tb testing.TB, entries ...string) []netipx.IPRange {
	tb.Helper()
	ranges := make([]netipx.IPRange, 0, len(entries))
	for _, entry := range entries {
		ranges = append(ranges, mustRange(tb, entry))
	}
	return ranges
}

func mustSubnet(tb testing.TB, prefix, gateway string) Subnet {
	tb.Helper()
	s := Subnet{Prefix: netip.MustParsePrefix(prefix)}
	if gateway != "" {
		s.Gateway = ip(gateway)
	}
	return s
}

func mustSpace(tb testing.TB, cfg SpaceConfig) *Space {
	tb.Helper()
	space, err := NewSpace(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return space
}

func rangeStrings(ranges []netipx.IPRange) []string {
	out := make([]string, len(ranges))
	for i, r := range ranges {
		out[i] = r.String()
	}
	return out
}

// ranges returns the free intervals in order, for white-box assertions.
func (f freeSet) ranges() []netipx.IPRange {
	var out []netipx.IPRange
	f.tree.Ascend(func(r netipx.IPRange) bool {
		out = append(out, r)
		return true
	})
	return out
}
