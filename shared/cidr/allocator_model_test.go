package cidr

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"go4.org/netipx"
)

// The model test drives the Allocator and a deliberately naive reference model
// with the same random operations on random small spaces and requires
// identical answers. The model also recomputes the allocatable set address by
// address straight from the SpaceConfig, so it checks NewSpace as well.

// modelWindow is how many addresses the random spaces span; operations also
// touch addresses up to modelReach, outside every range.
const (
	modelWindow = 64
	modelReach  = 80
)

// model is the reference allocator: the allocatable addresses one by one, and
// the set of those in use.
type model struct {
	allocatable []netip.Addr // sorted
	inUse       map[netip.Addr]bool
}

func newModel(cfg SpaceConfig, window []netip.Addr) *model {
	m := &model{inUse: map[netip.Addr]bool{}}
	for _, a := range window {
		if modelAllocatable(cfg, a) {
			m.allocatable = append(m.allocatable, a)
		}
	}
	return m
}

// modelAllocatable restates the rules of SpaceConfig for a single address.
func modelAllocatable(cfg SpaceConfig, a netip.Addr) bool {
	inAny := func(ranges []netipx.IPRange) bool {
		return slices.ContainsFunc(ranges, func(r netipx.IPRange) bool { return r.Contains(a) })
	}
	if !inAny(cfg.Ranges) || inAny(cfg.Excluded) || slices.Contains(cfg.Reserved, a) {
		return false
	}
	for _, s := range cfg.Subnets {
		if a == s.Gateway {
			return false
		}
		hostBits := a.BitLen() - s.Prefix.Bits()
		network, last := s.Prefix.Masked().Addr(), netipx.PrefixLastIP(s.Prefix)
		if !cfg.AllocateReserved && hostBits >= 2 && (a == network || (a.Is4() && a == last)) {
			return false
		}
	}
	return true
}

func (m *model) contains(a netip.Addr) bool {
	_, found := slices.BinarySearchFunc(m.allocatable, a, netip.Addr.Compare)
	return found
}

func (m *model) next() (netip.Addr, error) {
	for _, a := range m.allocatable {
		if !m.inUse[a] {
			m.inUse[a] = true
			return a, nil
		}
	}
	return netip.Addr{}, ErrExhausted
}

func (m *model) allocate(a netip.Addr) error {
	switch {
	case !m.contains(a):
		return ErrNotAllocatable
	case m.inUse[a]:
		return ErrInUse
	}
	m.inUse[a] = true
	return nil
}

func (m *model) release(a netip.Addr) error {
	switch {
	case !m.contains(a):
		return ErrNotAllocatable
	case !m.inUse[a]:
		return ErrNotInUse
	}
	delete(m.inUse, a)
	return nil
}

func (m *model) seed(addrs []netip.Addr) (outOfRange []netip.Addr) {
	for _, a := range addrs {
		if m.contains(a) {
			m.inUse[a] = true
		} else {
			outOfRange = append(outOfRange, a)
		}
	}
	return outOfRange
}

func TestAllocatorMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(20240601, 7))
	for round := range 400 {
		window := randomWindow(rng)
		cfg := randomSpaceConfig(rng, window[:modelWindow])
		space, err := NewSpace(cfg)
		if err != nil {
			t.Fatalf("round %d: NewSpace(%+v): %v", round, cfg, err)
		}
		alloc, ref := NewAllocator(space), newModel(cfg, window)
		if got, want := space.Total(), big.NewInt(int64(len(ref.allocatable))); got.Cmp(want) != 0 {
			t.Fatalf("round %d: Total() = %s, want %s for %+v", round, got, want, cfg)
		}
		for step := range 300 {
			op := runModelStep(t, rng, window, alloc, ref)
			if t.Failed() {
				t.Fatalf("round %d, step %d (%s) diverged from the model; config %+v", round, step, op, cfg)
			}
		}
		assertSameState(t, window, alloc, ref)
	}
}

// runModelStep applies one random operation to both and reports its name.
func runModelStep(t *testing.T, rng *rand.Rand, window []netip.Addr, alloc *Allocator, ref *model) string {
	randomAddr := func() netip.Addr { return window[rng.IntN(len(window))] }
	switch rng.IntN(10) {
	case 0, 1, 2, 3:
		got, err := alloc.Next()
		if ref.inUse[got] {
			t.Errorf("Next() = %s, which is already in use", got)
		}
		want, wantErr := ref.next()
		if got != want || !errors.Is(err, wantErr) {
			t.Errorf("Next() = %s, %v; model says %s, %v", got, err, want, wantErr)
		}
		return "Next"
	case 4, 5:
		a := randomAddr()
		if err, want := alloc.Allocate(a), ref.allocate(a); !errors.Is(err, want) {
			t.Errorf("Allocate(%s) = %v; model says %v", a, err, want)
		}
		return "Allocate"
	case 6, 7, 8:
		a := randomAddr()
		if err, want := alloc.Release(a), ref.release(a); !errors.Is(err, want) {
			t.Errorf("Release(%s) = %v; model says %v", a, err, want)
		}
		return "Release"
	default:
		addrs := make([]netip.Addr, rng.IntN(6))
		for i := range addrs {
			addrs[i] = randomAddr()
		}
		if got, want := alloc.Seed(addrs), ref.seed(addrs); !slices.Equal(got, want) {
			t.Errorf("Seed(%v) = %v; model says %v", addrs, got, want)
		}
		assertSameState(t, window, alloc, ref)
		return "Seed"
	}
}

func assertSameState(t *testing.T, window []netip.Addr, alloc *Allocator, ref *model) {
	t.Helper()
	for _, a := range window {
		if got, want := alloc.Space().Contains(a), ref.contains(a); got != want {
			t.Errorf("Contains(%s) = %t; model says %t", a, got, want)
		}
		if got, want := alloc.InUse(a), ref.inUse[a]; got != want {
			t.Errorf("InUse(%s) = %t; model says %t", a, got, want)
		}
	}
	if got, want := alloc.Used(), len(ref.inUse); got != want {
		t.Errorf("Used() = %d; model says %d", got, want)
	}
	if got, want := alloc.Free(), big.NewInt(int64(len(ref.allocatable)-len(ref.inUse))); got.Cmp(want) != 0 {
		t.Errorf("Free() = %s; model says %s", got, want)
	}
}

// randomWindow returns modelReach consecutive addresses of a random family:
// at its bottom, at its top, or somewhere in between, so that the edges of the
// address families get exercised as often as the middle.
func randomWindow(rng *rand.Rand) []netip.Addr {
	first, last := netip.IPv4Unspecified(), ip("255.255.255.255")
	middle := netip.AddrFrom4([4]byte{10, byte(rng.IntN(256)), byte(rng.IntN(256)), 0})
	if rng.IntN(2) == 0 {
		first, last = netip.IPv6Unspecified(), ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
		middle = netip.AddrFrom16([16]byte{0: 0xfd, 13: byte(rng.IntN(256)), 14: byte(rng.IntN(256))})
	}
	start := middle
	switch rng.IntN(3) {
	case 0:
		start = first
	case 1:
		start = last
		for range modelReach - 1 {
			start = start.Prev()
		}
	}
	window := make([]netip.Addr, modelReach)
	for i := range window {
		window[i] = start
		start = start.Next()
	}
	return window
}

// randomSpaceConfig returns a valid SpaceConfig whose ranges, exclusions,
// reservations and subnets all lie within window.
func randomSpaceConfig(rng *rand.Rand, window []netip.Addr) SpaceConfig {
	randomRanges := func(n, maxLen int) []netipx.IPRange {
		ranges := make([]netipx.IPRange, n)
		for i := range ranges {
			from := rng.IntN(len(window))
			to := min(from+rng.IntN(maxLen), len(window)-1)
			ranges[i] = netipx.IPRangeFrom(window[from], window[to])
		}
		return ranges
	}
	cfg := SpaceConfig{
		Ranges:           randomRanges(1+rng.IntN(4), 32),
		Excluded:         randomRanges(rng.IntN(3), 6),
		AllocateReserved: rng.IntN(2) == 0,
	}
	for range rng.IntN(4) {
		cfg.Reserved = append(cfg.Reserved, window[rng.IntN(len(window))])
	}
	seen := map[netip.Prefix]bool{}
	for range rng.IntN(4) {
		bits := window[0].BitLen() - rng.IntN(6) // /27../32 or /123../128
		prefix := netip.PrefixFrom(window[rng.IntN(len(window))], bits).Masked()
		if seen[prefix] {
			continue // one prefix with two gateways is invalid
		}
		seen[prefix] = true
		subnet := Subnet{Prefix: prefix}
		if rng.IntN(3) > 0 {
			subnet.Gateway = randomAddrIn(rng, prefix)
		}
		cfg.Subnets = append(cfg.Subnets, subnet)
	}
	return cfg
}

func randomAddrIn(rng *rand.Rand, p netip.Prefix) netip.Addr {
	a := p.Addr()
	for range rng.IntN(1 << (a.BitLen() - p.Bits())) {
		a = a.Next()
	}
	return a
}
