package cidr

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"

	"go4.org/netipx"
)

// The Allocator's errors, for errors.Is. Errors about a specific address wrap
// them with the address.
var (
	// ErrExhausted is returned by Next when every address of the space is in
	// use.
	ErrExhausted = errors.New("address space exhausted")
	// ErrInUse is returned by Allocate for an address already in use.
	ErrInUse = errors.New("address already in use")
	// ErrNotInUse is returned by Release for an allocatable address that is
	// free.
	ErrNotInUse = errors.New("address not in use")
	// ErrNotAllocatable is returned by Allocate and Release for an address
	// outside the space, or excluded or reserved in it.
	ErrNotAllocatable = errors.New("address not allocatable")
)

// Allocator hands out the addresses of one Space, lowest free address first,
// and never one that is already in use.
//
// It tracks the free addresses rather than the used ones, as intervals (see
// freeSet). The lowest free address is the start of the first interval; Next,
// Allocate, Release and InUse cost O(log f) in the number f of free
// fragments, whatever the size of the space; and an address is in use exactly
// when it is allocatable and not free, so there is no second set to keep in
// step with the first.
//
// An Allocator is not safe for concurrent use: callers serialise access, for
// example with one lock per pool.
//
// The space's withheld addresses are kept out of the free set, so Next never
// sees them, and tracked in a set of their own.
type Allocator struct {
	space *Space
	free  freeSet
	// withheldFree are the space's withheld addresses not in use.
	withheldFree map[netip.Addr]bool
	used         int
	// blocked counts the addresses TakeRange took: a whole prefix may hold
	// more addresses than any integer type.
	blocked *big.Int
}

// NewAllocator returns an Allocator with every address of space free.
func NewAllocator(space *Space) *Allocator {
	a := &Allocator{space: space, free: newFreeSet(space.Ranges()), withheldFree: map[netip.Addr]bool{}, blocked: new(big.Int)}
	withheld := make([]netip.Addr, 0, len(space.withheld))
	for addr := range space.withheld {
		withheld = append(withheld, addr)
		a.withheldFree[addr] = true
	}
	slices.SortFunc(withheld, netip.Addr.Compare)
	a.free.removeSorted(withheld)
	return a
}

// Next marks the lowest free address used and returns it, or returns
// ErrExhausted.
func (a *Allocator) Next() (netip.Addr, error) {
	first, ok := a.free.first()
	if !ok {
		return netip.Addr{}, ErrExhausted
	}
	addr := first.From()
	a.free.remove(first, addr)
	a.used++
	return addr, nil
}

// Allocate marks addr used. It fails with ErrInUse if it already is, and with
// ErrNotAllocatable if it is not in the space.
func (a *Allocator) Allocate(addr netip.Addr) error {
	if !a.space.Contains(addr) {
		return fmt.Errorf("%w: %s", ErrNotAllocatable, addr)
	}
	if a.space.Withheld(addr) {
		if !a.withheldFree[addr] {
			return fmt.Errorf("%w: %s", ErrInUse, addr)
		}
		delete(a.withheldFree, addr)
		a.used++
		return nil
	}
	free, ok := a.free.containing(addr)
	if !ok {
		return fmt.Errorf("%w: %s", ErrInUse, addr)
	}
	a.free.remove(free, addr)
	a.used++
	return nil
}

// Release makes addr free again. It fails with ErrNotInUse if addr was free,
// and with ErrNotAllocatable if it is not in the space.
func (a *Allocator) Release(addr netip.Addr) error {
	if !a.space.Contains(addr) {
		return fmt.Errorf("%w: %s", ErrNotAllocatable, addr)
	}
	if a.space.Withheld(addr) {
		if a.withheldFree[addr] {
			return fmt.Errorf("%w: %s", ErrNotInUse, addr)
		}
		a.withheldFree[addr] = true
		a.used--
		return nil
	}
	if _, free := a.free.containing(addr); free {
		return fmt.Errorf("%w: %s", ErrNotInUse, addr)
	}
	a.free.put(addr)
	a.used--
	return nil
}

// Seed marks every address of inUse used, as on a restart or after the space
// changed. Addresses already in use, including duplicates in inUse, are
// fine. Addresses outside the space are not an error, as the space may have
// shrunk under addresses that are still claimed: they are returned, in input
// order, for the caller to report.
//
// Seed sorts the addresses and merges them into the free set in one pass, so
// it costs O(k log k + f) for k addresses and f free fragments.
func (a *Allocator) Seed(inUse []netip.Addr) (outOfRange []netip.Addr) {
	allocatable := make([]netip.Addr, 0, len(inUse))
	for _, addr := range inUse {
		switch {
		case a.space.Withheld(addr):
			if a.withheldFree[addr] {
				delete(a.withheldFree, addr)
				a.used++
			}
		case a.space.Contains(addr):
			allocatable = append(allocatable, addr)
		default:
			outOfRange = append(outOfRange, addr)
		}
	}
	slices.SortFunc(allocatable, netip.Addr.Compare)
	a.used += a.free.removeSorted(allocatable)
	return outOfRange
}

// InUse reports whether addr is allocatable and in use.
func (a *Allocator) InUse(addr netip.Addr) bool {
	if !a.space.Contains(addr) {
		return false
	}
	if a.space.Withheld(addr) {
		return !a.withheldFree[addr]
	}
	_, free := a.free.containing(addr)
	return !free
}

// Used returns the number of addresses in use.
func (a *Allocator) Used() int { return a.used }

// Free returns the number of free addresses.
func (a *Allocator) Free() *big.Int {
	free := new(big.Int).Sub(a.space.total, big.NewInt(int64(a.used)))
	return free.Sub(free, a.blocked)
}

// TakeRange marks every free address of r used, all at once: a prefix that
// another pool of the same space handed out whole. Its addresses are
// counted apart from Used, as they may outnumber any integer type. Ranges
// taken so must not overlap addresses taken one by one (see GiveRange).
func (a *Allocator) TakeRange(r netipx.IPRange) {
	a.blocked.Add(a.blocked, a.free.removeRange(r))
	for addr := range a.withheldFree {
		if r.Contains(addr) {
			delete(a.withheldFree, addr)
			a.blocked.Add(a.blocked, big.NewInt(1))
		}
	}
}

// GiveRange undoes TakeRange: every allocatable address of r is free
// again, including any taken one by one, which the caller takes again.
func (a *Allocator) GiveRange(r netipx.IPRange) {
	var b netipx.IPSetBuilder
	b.AddRange(r)
	b.Intersect(a.space.allocatable)
	for addr := range a.space.withheld {
		if r.Contains(addr) {
			b.Remove(addr)
			if !a.withheldFree[addr] {
				a.withheldFree[addr] = true
				a.blocked.Sub(a.blocked, big.NewInt(1))
			}
		}
	}
	allocatable, _ := b.IPSet() // built from valid ranges only
	for _, piece := range allocatable.Ranges() {
		a.blocked.Sub(a.blocked, a.free.putRange(piece))
	}
}

// Space returns the space the Allocator hands out addresses of.
func (a *Allocator) Space() *Space { return a.space }
