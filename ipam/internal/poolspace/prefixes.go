package poolspace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"net/netip"

	"go4.org/netipx"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

// Prefixes are the prefixes a prefix pool (spec.allocationPrefixLength)
// hands out: every prefix of that length, aligned on it, all of whose
// addresses the pool's space holds. So a prefix holding a gateway, an
// excluded or reserved address, or reaching outside the pool's addresses is
// never handed out.
//
// The prefixes are numbered (a prefix's number is its first address
// shifted right by the host bits), and the numbers of the prefixes handed
// out form a space of their own, on which a cidr.Allocator does the work:
// consecutive prefixes have consecutive numbers, so the free ones are a few
// intervals whatever their count, and a claim costs what an address costs,
// O(log f) in the free fragments, however full the pool.
//
// A number is written as an address of the pool's family: IPv4 numbers fit
// 32 bits; an IPv6 number is tagged with the top bit (it has at most 127),
// so that no number reads as an IPv4-mapped address, which cidr refuses.
type Prefixes struct {
	bits, shift int
	family      cidr.Family
	numbers     *cidr.Space
}

// errNoPrefix: the space holds no whole prefix of the length.
var errNoPrefix = errors.New("holds no whole prefix of that length")

// newPrefixes numbers the prefixes of length bits that space holds whole.
func newPrefixes(space *cidr.Space, bits int) (*Prefixes, error) {
	p := &Prefixes{bits: bits, family: space.Family(), shift: space.Family().Bits() - bits}
	var numbers []netipx.IPRange
	for _, r := range space.Ranges() {
		first, last := toUint128(r.From()), toUint128(r.To())
		from, to := first.rsh(p.shift), last.rsh(p.shift)
		if first.lowBits(p.shift) != (uint128{}) {
			from = from.add1() // r starts inside a prefix: the next one is the first whole one
		}
		if last.lowBits(p.shift) != ones(p.shift) {
			if to == (uint128{}) {
				continue
			}
			to = to.sub1() // r ends inside a prefix: the one before is the last whole one
		}
		if to.less(from) {
			continue
		}
		numbers = append(numbers, netipx.IPRangeFrom(p.number(from), p.number(to)))
	}
	if len(numbers) == 0 {
		return nil, errNoPrefix
	}
	n, err := cidr.NewSpace(cidr.SpaceConfig{Ranges: numbers, AllocateReserved: true})
	if err != nil {
		return nil, fmt.Errorf("numbering the prefixes: %w", err)
	}
	p.numbers = n
	return p, nil
}

// Bits is the length of the prefixes handed out.
func (p *Prefixes) Bits() int { return p.bits }

// Total is the number of prefixes the pool hands out.
func (p *Prefixes) Total() *big.Int { return p.numbers.Total() }

// Contains reports whether prefix is one the pool hands out.
func (p *Prefixes) Contains(prefix netip.Prefix) bool {
	return prefix.Bits() == p.bits && prefix.Masked() == prefix &&
		cidr.FamilyOf(prefix.Addr()) == p.family && p.numbers.Contains(p.numberOf(prefix.Addr()))
}

// PrefixOf is the prefix of the pool's length whose first address is a.
func (p *Prefixes) PrefixOf(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, p.bits).Masked() }

// Span is the addresses of the prefixes that share an address with r.
func (p *Prefixes) Span(r netipx.IPRange) netipx.IPRange {
	return netipx.IPRangeFrom(p.PrefixOf(r.From()).Addr(), netipx.RangeOfPrefix(p.PrefixOf(r.To())).To())
}

// numberOf is the number of the prefix holding a.
func (p *Prefixes) numberOf(a netip.Addr) netip.Addr { return p.number(toUint128(a).rsh(p.shift)) }

// number writes a prefix number as an address (see Prefixes).
func (p *Prefixes) number(n uint128) netip.Addr {
	if p.family == cidr.IPv4 {
		return netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, uint32(n.lo))))
	}
	if p.shift > 0 {
		n.hi |= 1 << 63
	}
	return n.addr()
}

// first is the first address of the prefix numbered by a.
func (p *Prefixes) first(number netip.Addr) netip.Addr {
	n := toUint128(number)
	if p.family == cidr.IPv6 && p.shift > 0 {
		n.hi &^= 1 << 63
	}
	n = n.lsh(p.shift)
	if p.family == cidr.IPv4 {
		return netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, uint32(n.lo))))
	}
	return n.addr()
}

// PrefixAllocator hands out the prefixes of Prefixes, lowest free first.
// Like cidr.Allocator, which it wraps, it is not safe for concurrent use.
type PrefixAllocator struct {
	prefixes *Prefixes
	alloc    *cidr.Allocator
}

// NewPrefixAllocator returns an allocator with every prefix free.
func NewPrefixAllocator(p *Prefixes) *PrefixAllocator {
	return &PrefixAllocator{prefixes: p, alloc: cidr.NewAllocator(p.numbers)}
}

// Prefixes returns what the allocator hands out.
func (a *PrefixAllocator) Prefixes() *Prefixes { return a.prefixes }

// Next takes the lowest free prefix, or fails with cidr.ErrExhausted.
func (a *PrefixAllocator) Next() (netip.Prefix, error) {
	n, err := a.alloc.Next()
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a.prefixes.first(n), a.prefixes.bits), nil
}

// Allocate takes prefix, or fails with cidr.ErrInUse, or
// cidr.ErrNotAllocatable for one the pool does not hand out.
func (a *PrefixAllocator) Allocate(prefix netip.Prefix) error {
	if !a.prefixes.Contains(prefix) {
		return fmt.Errorf("%w: %s", cidr.ErrNotAllocatable, prefix)
	}
	if err := a.alloc.Allocate(a.prefixes.numberOf(prefix.Addr())); err != nil {
		return fmt.Errorf("%w: %s", errors.Unwrap(err), prefix)
	}
	return nil
}

// Take marks every prefix sharing an address with r used: r is held by
// another claim (an address, a prefix of any length).
func (a *PrefixAllocator) Take(r netipx.IPRange) {
	a.alloc.TakeRange(netipx.IPRangeFrom(a.prefixes.numberOf(r.From()), a.prefixes.numberOf(r.To())))
}

// Give frees every prefix sharing an address with r: the caller takes
// again whatever else is held in Span(r) (an address released leaves
// its prefix free only when it was the prefix's last).
func (a *PrefixAllocator) Give(r netipx.IPRange) {
	if netipx.RangeOfPrefix(a.prefixes.PrefixOf(r.From())) == r {
		// One prefix of the pool's, the release of a claim: the
		// allocator's own Release, without building a set.
		_ = a.alloc.Release(a.prefixes.numberOf(r.From())) // not handed out here, or free already: nothing to do
		return
	}
	a.alloc.GiveRange(netipx.IPRangeFrom(a.prefixes.numberOf(r.From()), a.prefixes.numberOf(r.To())))
}

// Free is the number of free prefixes.
func (a *PrefixAllocator) Free() *big.Int { return a.alloc.Free() }

// uint128 is an address as a number, for shifting.
type uint128 struct{ hi, lo uint64 }

func toUint128(a netip.Addr) uint128 {
	if a.Is4() {
		b := a.As4()
		return uint128{lo: uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return uint128{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}
}

func (u uint128) addr() netip.Addr {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.hi)
	binary.BigEndian.PutUint64(b[8:], u.lo)
	return netip.AddrFrom16(b)
}

func (u uint128) rsh(n int) uint128 {
	switch {
	case n == 0:
		return u
	case n >= 64:
		return uint128{lo: u.hi >> (n - 64)}
	}
	return uint128{hi: u.hi >> n, lo: u.lo>>n | u.hi<<(64-n)}
}

func (u uint128) lsh(n int) uint128 {
	switch {
	case n == 0:
		return u
	case n >= 64:
		return uint128{hi: u.lo << (n - 64)}
	}
	return uint128{hi: u.hi<<n | u.lo>>(64-n), lo: u.lo << n}
}

// lowBits keeps the n lowest bits.
func (u uint128) lowBits(n int) uint128 {
	m := ones(n)
	return uint128{hi: u.hi & m.hi, lo: u.lo & m.lo}
}

// ones is the number whose n lowest bits are set.
func ones(n int) uint128 {
	switch {
	case n == 0:
		return uint128{}
	case n < 64:
		return uint128{lo: 1<<n - 1}
	case n == 64:
		return uint128{lo: ^uint64(0)}
	case n < 128:
		return uint128{hi: 1<<(n-64) - 1, lo: ^uint64(0)}
	}
	return uint128{hi: ^uint64(0), lo: ^uint64(0)}
}

func (u uint128) add1() uint128 {
	if u.lo == ^uint64(0) {
		return uint128{hi: u.hi + 1}
	}
	return uint128{hi: u.hi, lo: u.lo + 1}
}

func (u uint128) sub1() uint128 {
	if u.lo == 0 {
		return uint128{hi: u.hi - 1, lo: ^uint64(0)}
	}
	return uint128{hi: u.hi, lo: u.lo - 1}
}

func (u uint128) less(v uint128) bool { return u.hi < v.hi || (u.hi == v.hi && u.lo < v.lo) }
