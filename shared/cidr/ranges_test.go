package cidr

import (
	"math/big"
	"math/rand/v2"
	"net/netip"
	"testing"

	"go4.org/netipx"
)

func TestOverlap(t *testing.T) {
	tests := []struct {
		name   string
		ranges []netipx.IPRange
		wantOK bool
		i, j   int
	}{
		{name: "empty"},
		{name: "single", ranges: mustRanges(t, "10.0.0.0/24")},
		{name: "adjacent", ranges: mustRanges(t, "10.0.0.6-10.0.0.9", "10.0.0.0-10.0.0.5")},
		{name: "families never overlap", ranges: []netipx.IPRange{mustRange(t, "0.0.0.0/0"), mustRange(t, "::/0")}},
		{name: "invalid ranges overlap nothing", ranges: []netipx.IPRange{{}, {}, netipx.IPRangeFrom(ip("10.0.0.9"), ip("10.0.0.1"))}},
		{name: "identical", ranges: mustRanges(t, "10.0.0.1", "10.0.0.0/24", "10.0.1.0/24", "10.0.1.0/24"), wantOK: true, i: 0, j: 1},
		{name: "contained", ranges: mustRanges(t, "10.0.1.0/24", "10.0.0.0/24", "10.0.0.128/25"), wantOK: true, i: 1, j: 2},
		{name: "sharing one end", ranges: mustRanges(t, "fd00::1-fd00::5", "fd00::5-fd00::9"), wantOK: true, i: 0, j: 1},
		{
			// 1-2 overlap too, but the nested loop order meets 0-3 first.
			name:   "smallest i before smallest j",
			ranges: mustRanges(t, "10.0.0.50-10.0.0.60", "10.0.0.0-10.0.0.10", "10.0.0.5", "10.0.0.55"),
			wantOK: true, i: 0, j: 3,
		},
		{
			// Sorted, 10.0.0.50-60 follows 10.0.0.10-20, which it does not
			// overlap; only the furthest end so far (100) reveals the overlap.
			name:   "overlap with a range ending further back",
			ranges: mustRanges(t, "10.0.0.50-10.0.0.60", "10.0.0.0-10.0.0.100", "10.0.0.10-10.0.0.20"),
			wantOK: true, i: 0, j: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i, j, ok := Overlap(tt.ranges)
			if ok != tt.wantOK || (ok && (i != tt.i || j != tt.j)) {
				t.Fatalf("Overlap(%s) = %d, %d, %t; want %d, %d, %t", rangeStrings(tt.ranges), i, j, ok, tt.i, tt.j, tt.wantOK)
			}
		})
	}
}

// TestOverlapMatchesNestedLoop checks Overlap against the obvious O(n²)
// definition on many small random inputs, where overlaps are frequent.
func TestOverlapMatchesNestedLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		ranges := make([]netipx.IPRange, rng.IntN(12))
		for k := range ranges {
			from := netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(200))})
			to := netip.AddrFrom4([4]byte{10, 0, 0, from.As4()[3] + byte(rng.IntN(8))})
			ranges[k] = netipx.IPRangeFrom(from, to)
		}
		wantI, wantJ, wantOK := overlapNestedLoop(ranges)
		if i, j, ok := Overlap(ranges); i != wantI || j != wantJ || ok != wantOK {
			t.Fatalf("Overlap(%s) = %d, %d, %t; want %d, %d, %t", rangeStrings(ranges), i, j, ok, wantI, wantJ, wantOK)
		}
	}
}

func overlapNestedLoop(ranges []netipx.IPRange) (i, j int, ok bool) {
	for i := range ranges {
		for j := i + 1; j < len(ranges); j++ {
			if ranges[i].Overlaps(ranges[j]) {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}

func TestSize(t *testing.T) {
	tests := []struct {
		r    netipx.IPRange
		want *big.Int
	}{
		{r: mustRange(t, "10.0.0.5"), want: big.NewInt(1)},
		{r: mustRange(t, "10.0.0.0/24"), want: big.NewInt(256)},
		{r: mustRange(t, "10.0.0.255-10.0.1.1"), want: big.NewInt(3)},
		{r: mustRange(t, "0.0.0.0/0"), want: new(big.Int).Lsh(big.NewInt(1), 32)},
		{r: mustRange(t, "fd00::/64"), want: new(big.Int).Lsh(big.NewInt(1), 64)},
		{r: mustRange(t, "::/0"), want: new(big.Int).Lsh(big.NewInt(1), 128)},
		{r: netipx.IPRange{}, want: big.NewInt(0)},
	}
	for _, tt := range tests {
		if got := Size(tt.r); got.Cmp(tt.want) != 0 {
			t.Errorf("Size(%s) = %s, want %s", tt.r, got, tt.want)
		}
	}
}
