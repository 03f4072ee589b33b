package cidr

import (
	"math/big"
	"net/netip"
	"testing"

	"go4.org/netipx"
)

// TestTakeRange: a prefix taken whole is skipped by Next, counted exactly
// however large, and free again once given back, merged with its
// neighbours; the gateway and withheld addresses inside it stay as they were.
func TestTakeRange(t *testing.T) {
	prefix := netip.MustParsePrefix("fd00::/48")
	space := mustSpace(t, SpaceConfig{
		Ranges:   []netipx.IPRange{netipx.RangeOfPrefix(prefix)},
		Subnets:  []Subnet{{Prefix: prefix, Gateway: ip("fd00::1")}},
		Withheld: []netip.Addr{ip("fd00::5")},
	})
	a := NewAllocator(space)
	total := space.Total()
	taken := netipx.RangeOfPrefix(netip.MustParsePrefix("fd00::/64"))
	a.TakeRange(taken)
	// The /64 less its anycast and gateway addresses, which are not allocatable.
	want := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 64), big.NewInt(2))
	if got := new(big.Int).Sub(total, a.Free()); got.Cmp(want) != 0 {
		t.Fatalf("taken = %s, want %s", got, want)
	}
	if err := a.Allocate(ip("fd00::5")); err == nil {
		t.Fatal("a withheld address inside a taken range was handed out")
	}
	if next, err := a.Next(); err != nil || next != ip("fd00:0:0:1::") {
		t.Fatalf("Next = %s, %v; want fd00:0:0:1::", next, err)
	}
	a.GiveRange(taken)
	if got, want := a.Free(), new(big.Int).Sub(total, big.NewInt(1)); got.Cmp(want) != 0 {
		t.Fatalf("Free after GiveRange = %s, want %s", got, want)
	}
	if next, err := a.Next(); err != nil || next != ip("fd00::2") {
		t.Fatalf("Next after GiveRange = %s, %v; want fd00::2", next, err)
	}
	if err := a.Allocate(ip("fd00::5")); err != nil {
		t.Fatalf("withheld address not free again: %v", err)
	}
	if got := len(a.free.ranges()); got != 3 {
		t.Fatalf("free intervals = %v, want 3: around fd00::2, fd00::5 and fd00:0:0:1::, merged across the range given back", rangeStrings(a.free.ranges()))
	}
}
