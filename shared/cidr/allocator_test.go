package cidr

import (
	"errors"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"go4.org/netipx"
)

// drain calls Next until the space is exhausted and returns what it handed
// out. It gives up after drainLimit addresses; every test space is smaller.
func drain(t *testing.T, a *Allocator) []string {
	t.Helper()
	const drainLimit = 1000
	var got []string
	for range drainLimit {
		addr, err := a.Next()
		if errors.Is(err, ErrExhausted) {
			return got
		}
		if err != nil {
			t.Fatalf("Next(): %v", err)
		}
		got = append(got, addr.String())
	}
	t.Fatalf("Next() handed out more than %d addresses: %q...", drainLimit, got[:10])
	return nil
}

func TestAllocatorNextIsLowestFirst(t *testing.T) {
	a := NewAllocator(mustSpace(t, SpaceConfig{
		Ranges:   mustRanges(t, "10.0.0.0/28"),
		Subnets:  []Subnet{mustSubnet(t, "10.0.0.0/28", "10.0.0.1")},
		Excluded: mustRanges(t, "10.0.0.5-10.0.0.6"),
		Reserved: []netip.Addr{ip("10.0.0.9")},
	}))
	want := []string{"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.7", "10.0.0.8", "10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14"}
	if got := drain(t, a); !slices.Equal(got, want) {
		t.Fatalf("Next() handed out %q, want %q", got, want)
	}
}

func TestAllocatorExhaustionAndRecovery(t *testing.T) {
	a := NewAllocator(mustSpace(t, SpaceConfig{Ranges: mustRanges(t, "10.0.0.1-10.0.0.3")}))
	if got := drain(t, a); len(got) != 3 {
		t.Fatalf("handed out %q, want 3 addresses", got)
	}
	if _, err := a.Next(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Next() on a full space: %v, want ErrExhausted", err)
	}
	for _, released := range []string{"10.0.0.3", "10.0.0.2"} {
		if err := a.Release(ip(released)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := drain(t, a), []string{"10.0.0.2", "10.0.0.3"}; !slices.Equal(got, want) {
		t.Fatalf("after releasing, Next() handed out %q, want %q", got, want)
	}
}

func TestAllocatorAllocate(t *testing.T) {
	a := NewAllocator(mustSpace(t, SpaceConfig{
		Ranges:  mustRanges(t, "10.0.0.0/29"),
		Subnets: []Subnet{mustSubnet(t, "10.0.0.0/29", "10.0.0.1")},
	}))
	for _, addr := range []string{"10.0.0.4", "10.0.0.2", "10.0.0.6"} {
		if err := a.Allocate(ip(addr)); err != nil {
			t.Fatalf("Allocate(%s): %v", addr, err)
		}
	}
	tests := []struct {
		addr string
		want error
	}{
		{addr: "10.0.0.4", want: ErrInUse},
		{addr: "10.0.0.1", want: ErrNotAllocatable}, // gateway
		{addr: "10.0.0.0", want: ErrNotAllocatable}, // network
		{addr: "10.0.0.7", want: ErrNotAllocatable}, // broadcast
		{addr: "10.0.0.8", want: ErrNotAllocatable},
		{addr: "fd00::4", want: ErrNotAllocatable},
		{addr: "::ffff:10.0.0.3", want: ErrNotAllocatable},
	}
	for _, tt := range tests {
		err := a.Allocate(ip(tt.addr))
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.addr) {
			t.Errorf("Allocate(%s) = %v, want %v naming the address", tt.addr, err, tt.want)
		}
	}
	if err := a.Allocate(netip.Addr{}); !errors.Is(err, ErrNotAllocatable) {
		t.Errorf("Allocate(zero) = %v, want ErrNotAllocatable", err)
	}
	if got, want := drain(t, a), []string{"10.0.0.3", "10.0.0.5"}; !slices.Equal(got, want) {
		t.Fatalf("Next() handed out %q, want %q", got, want)
	}
}

func TestAllocatorRelease(t *testing.T) {
	a := NewAllocator(mustSpace(t, SpaceConfig{
		Ranges:   mustRanges(t, "10.0.0.0/28"),
		Excluded: mustRanges(t, "10.0.0.8"),
	}))
	if err := a.Release(ip("10.0.0.3")); !errors.Is(err, ErrNotInUse) || !strings.Contains(err.Error(), "10.0.0.3") {
		t.Errorf("Release of a free address = %v, want ErrNotInUse naming it", err)
	}
	for _, addr := range []string{"10.0.0.8", "10.0.0.16", "fd00::3"} {
		if err := a.Release(ip(addr)); !errors.Is(err, ErrNotAllocatable) {
			t.Errorf("Release(%s) = %v, want ErrNotAllocatable", addr, err)
		}
	}

	drain(t, a)
	// Release in an order that exercises every way of merging: alone, onto
	// the interval below, onto the interval above, and bridging two.
	for _, addr := range []string{"10.0.0.0", "10.0.0.5", "10.0.0.15", "10.0.0.7", "10.0.0.3", "10.0.0.6", "10.0.0.1", "10.0.0.4", "10.0.0.14", "10.0.0.9"} {
		if err := a.Release(ip(addr)); err != nil {
			t.Fatalf("Release(%s): %v", addr, err)
		}
		if a.InUse(ip(addr)) {
			t.Fatalf("InUse(%s) after releasing it", addr)
		}
	}
	if err := a.Release(ip("10.0.0.5")); !errors.Is(err, ErrNotInUse) {
		t.Errorf("second Release = %v, want ErrNotInUse", err)
	}
	if got, want := rangeStrings(a.free.ranges()), []string{"10.0.0.0-10.0.0.1", "10.0.0.3-10.0.0.7", "10.0.0.9-10.0.0.9", "10.0.0.14-10.0.0.15"}; !slices.Equal(got, want) {
		t.Errorf("free intervals = %q, want %q", got, want)
	}
	if got, want := drain(t, a), []string{"10.0.0.0", "10.0.0.1", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.9", "10.0.0.14", "10.0.0.15"}; !slices.Equal(got, want) {
		t.Fatalf("Next() handed out %q, want %q", got, want)
	}
}

func TestAllocatorSeed(t *testing.T) {
	a := NewAllocator(mustSpace(t, SpaceConfig{
		Ranges:  mustRanges(t, "10.0.0.0/29"),
		Subnets: []Subnet{mustSubnet(t, "10.0.0.0/29", "10.0.0.1")},
	}))
	if err := a.Allocate(ip("10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	outOfRange := a.Seed([]netip.Addr{ip("10.0.0.3"), ip("10.0.9.9"), ip("10.0.0.3"), ip("10.0.0.1"), ip("10.0.0.5"), ip("fd00::3"), ip("10.0.0.2")})
	if got, want := outOfRange, []netip.Addr{ip("10.0.9.9"), ip("10.0.0.1"), ip("fd00::3")}; !slices.Equal(got, want) {
		t.Errorf("Seed() returned %v, want %v", got, want)
	}
	if got := a.Used(); got != 3 {
		t.Errorf("Used() = %d, want 3", got)
	}
	for addr, want := range map[string]bool{"10.0.0.2": true, "10.0.0.3": true, "10.0.0.5": true, "10.0.0.4": false, "10.0.0.1": false, "10.0.9.9": false} {
		if got := a.InUse(ip(addr)); got != want {
			t.Errorf("InUse(%s) = %t, want %t", addr, got, want)
		}
	}
	if got, want := drain(t, a), []string{"10.0.0.4", "10.0.0.6"}; !slices.Equal(got, want) {
		t.Errorf("Next() handed out %q, want %q", got, want)
	}
	if got := a.Seed(nil); got != nil {
		t.Errorf("Seed(nil) = %v, want nil", got)
	}
}

func TestAllocatorCounts(t *testing.T) {
	pow2 := func(n uint) *big.Int { return new(big.Int).Lsh(big.NewInt(1), n) }
	minus := func(x *big.Int, n int64) *big.Int { return new(big.Int).Sub(x, big.NewInt(n)) }
	tests := []struct {
		name  string
		cfg   SpaceConfig
		total *big.Int
		first string
		last  string // the highest allocatable address
	}{
		{
			name:  "IPv4 /24",
			cfg:   SpaceConfig{Ranges: mustRanges(t, "10.0.0.0/24"), Subnets: []Subnet{mustSubnet(t, "10.0.0.0/24", "10.0.0.1")}},
			total: big.NewInt(253), first: "10.0.0.2", last: "10.0.0.254",
		},
		{
			name:  "IPv6 /64 without its subnet-router anycast address",
			cfg:   SpaceConfig{Ranges: mustRanges(t, "fd00::/64"), Subnets: []Subnet{mustSubnet(t, "fd00::/64", "")}},
			total: minus(pow2(64), 1), first: "fd00::1", last: "fd00::ffff:ffff:ffff:ffff",
		},
		{
			name:  "all of IPv4",
			cfg:   SpaceConfig{Ranges: mustRanges(t, "0.0.0.0/0")},
			total: pow2(32), first: "0.0.0.0", last: "255.255.255.255",
		},
		{
			name:  "all of IPv6",
			cfg:   SpaceConfig{Ranges: mustRanges(t, "::/0")},
			total: pow2(128), first: "::", last: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
		},
		{
			name:  "all of IPv6 as one subnet",
			cfg:   SpaceConfig{Ranges: mustRanges(t, "::/0"), Subnets: []Subnet{mustSubnet(t, "::/0", "")}},
			total: minus(pow2(128), 1), first: "::1", last: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator(mustSpace(t, tt.cfg))
			assertCounts := func(used int) {
				t.Helper()
				if a.Used() != used {
					t.Errorf("Used() = %d, want %d", a.Used(), used)
				}
				if got := a.Space().Total(); got.Cmp(tt.total) != 0 {
					t.Errorf("Total() = %s, want %s", got, tt.total)
				}
				if got, want := a.Free(), minus(tt.total, int64(used)); got.Cmp(want) != 0 {
					t.Errorf("Free() = %s, want %s", got, want)
				}
			}
			assertCounts(0)

			first, err := a.Next()
			if err != nil || first.String() != tt.first {
				t.Fatalf("Next() = %s, %v; want %s", first, err, tt.first)
			}
			if err := a.Allocate(ip(tt.last)); err != nil {
				t.Fatalf("Allocate(%s): %v", tt.last, err)
			}
			assertCounts(2)

			// Releasing the very first and last addresses of a family must
			// not trip over their missing neighbours.
			for _, addr := range []netip.Addr{first, ip(tt.last)} {
				if err := a.Release(addr); err != nil {
					t.Fatalf("Release(%s): %v", addr, err)
				}
			}
			assertCounts(0)
			if got, want := rangeStrings(a.free.ranges()), rangeStrings(a.Space().Ranges()); !slices.Equal(got, want) {
				t.Errorf("free intervals after releasing everything = %q, want %q", got, want)
			}
		})
	}
}

// TestWithheldAddressesOnlyByName: withheld addresses are never handed out
// by Next, only by Allocate, and count as used and free like the others.
func TestWithheldAddressesOnlyByName(t *testing.T) {
	one, three := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.3")
	space, err := NewSpace(SpaceConfig{
		Ranges:   []netipx.IPRange{netipx.RangeOfPrefix(netip.MustParsePrefix("10.0.0.0/29"))},
		Subnets:  []Subnet{{Prefix: netip.MustParsePrefix("10.0.0.0/29")}},
		Withheld: []netip.Addr{one, three, netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("10.9.9.9")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !space.Withheld(one) || space.Withheld(netip.MustParseAddr("10.0.0.7")) || space.Withheld(netip.MustParseAddr("10.9.9.9")) {
		t.Fatal("Withheld must hold exactly the allocatable addresses asked for (not the broadcast address, not one outside)")
	}
	a := NewAllocator(space)
	if got := drain(t, a); !slices.Equal(got, []string{"10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.6"}) {
		t.Fatalf("Next handed out %q, want every address but the withheld ones", got)
	}
	if a.InUse(one) || a.Free().Int64() != 2 {
		t.Fatalf("withheld 10.0.0.1 in use %v, free %s; want free, 2 free", a.InUse(one), a.Free())
	}
	if err := a.Allocate(one); err != nil {
		t.Fatalf("Allocate(withheld) = %v", err)
	}
	if err := a.Allocate(one); !errors.Is(err, ErrInUse) {
		t.Fatalf("second Allocate(withheld) = %v, want ErrInUse", err)
	}
	if !a.InUse(one) || a.Used() != 5 {
		t.Fatalf("after Allocate: in use %v, used %d; want true, 5", a.InUse(one), a.Used())
	}
	if err := a.Release(one); err != nil {
		t.Fatalf("Release(withheld) = %v", err)
	}
	if err := a.Release(one); !errors.Is(err, ErrNotInUse) {
		t.Fatalf("second Release(withheld) = %v, want ErrNotInUse", err)
	}
	if _, err := a.Next(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Next after releasing a withheld address = %v, want ErrExhausted: it stays withheld", err)
	}
	a.Seed([]netip.Addr{three, three})
	if !a.InUse(three) || a.Used() != 5 {
		t.Fatalf("after Seed: in use %v, used %d; want true, 5 (a duplicate counts once)", a.InUse(three), a.Used())
	}
}
