package cidr

import (
	"math/big"
	"net/netip"

	"github.com/google/btree"
	"go4.org/netipx"
)

// freeSet is the free part of an address space: disjoint, non-adjacent
// intervals in a B-tree. Its size is proportional to the number of fragments,
// never to the number of addresses, so an IPv6 /64 is one interval.
//
// The intervals are ordered by their last address, which for disjoint
// intervals is the same order as by their first. Keying on the last address
// means that taking the lowest address of an interval, the hot path of Next,
// rewrites the interval under the same key: an in-place replace, not a delete
// plus an insert.
type freeSet struct {
	tree *btree.BTreeG[netipx.IPRange]
}

// freeSetDegree is the B-tree degree (nodes of up to 63 intervals). Degrees
// from 8 to 32 benchmark alike; the largest keeps the tree shallowest.
const freeSetDegree = 32

func newFreeSet(ranges []netipx.IPRange) freeSet {
	tree := btree.NewG(freeSetDegree, func(a, b netipx.IPRange) bool {
		return a.To().Less(b.To())
	})
	for _, r := range ranges {
		tree.ReplaceOrInsert(r)
	}
	return freeSet{tree: tree}
}

// first returns the lowest free interval.
func (f freeSet) first() (netipx.IPRange, bool) {
	return f.tree.Min()
}

// containing returns the free interval containing a. An invalid a (the
// neighbour of the first or last address of a family) is never free.
func (f freeSet) containing(a netip.Addr) (netipx.IPRange, bool) {
	if !a.IsValid() {
		return netipx.IPRange{}, false
	}
	var candidate netipx.IPRange // the first interval ending at or after a
	found := false
	f.tree.AscendGreaterOrEqual(netipx.IPRangeFrom(a, a), func(r netipx.IPRange) bool {
		candidate, found = r, true
		return false
	})
	return candidate, found && !a.Less(candidate.From())
}

// remove removes a from r, the free interval containing it, splitting r if a
// lies inside it.
func (f freeSet) remove(r netipx.IPRange, a netip.Addr) {
	if a == r.To() {
		f.tree.Delete(r)
	} else {
		f.tree.ReplaceOrInsert(netipx.IPRangeFrom(a.Next(), r.To()))
	}
	if a != r.From() {
		f.tree.ReplaceOrInsert(netipx.IPRangeFrom(r.From(), a.Prev()))
	}
}

// removeSorted removes addrs, which must be sorted, and returns how many of
// them were free (a repeated address is no longer free the second time). It
// merges the addresses into the intervals in one pass and rebuilds the tree,
// which for the tens of thousands of addresses of a restart is several times
// faster than removing them one by one.
func (f freeSet) removeSorted(addrs []netip.Addr) (removed int) {
	kept := make([]netipx.IPRange, 0, f.tree.Len()+len(addrs))
	f.tree.Ascend(func(r netipx.IPRange) bool {
		for len(addrs) > 0 && !r.To().Less(addrs[0]) {
			a := addrs[0]
			addrs = addrs[1:]
			if a.Less(r.From()) {
				continue // not free
			}
			removed++
			if a != r.From() {
				kept = append(kept, netipx.IPRangeFrom(r.From(), a.Prev()))
			}
			if a == r.To() {
				return true
			}
			r = netipx.IPRangeFrom(a.Next(), r.To())
		}
		kept = append(kept, r)
		return true
	})
	f.tree.Clear(true)
	for _, r := range kept {
		f.tree.ReplaceOrInsert(r)
	}
	return removed
}

// put adds a, which must not be free, merging it with the intervals that end
// right before it and start right after it.
func (f freeSet) put(a netip.Addr) {
	merged := netipx.IPRangeFrom(a, a)
	if below, ok := f.endingAt(a.Prev()); ok {
		f.tree.Delete(below)
		merged = netipx.IPRangeFrom(below.From(), a)
	}
	if above, ok := f.containing(a.Next()); ok {
		// above starts at a.Next(), as a is not free; the merged interval
		// ends where above ends, so it replaces above in place.
		merged = netipx.IPRangeFrom(merged.From(), above.To())
	}
	f.tree.ReplaceOrInsert(merged)
}

// endingAt returns the free interval whose last address is a. An invalid a
// (the predecessor of the first address of a family) matches nothing.
func (f freeSet) endingAt(a netip.Addr) (netipx.IPRange, bool) {
	if !a.IsValid() {
		return netipx.IPRange{}, false
	}
	return f.tree.Get(netipx.IPRangeFrom(a, a))
}

// removeRange removes every free address of r and returns how many there
// were. It visits only the intervals overlapping r, so a range as large as
// an IPv6 /64 costs what its few fragments cost.
func (f freeSet) removeRange(r netipx.IPRange) *big.Int {
	var overlapping []netipx.IPRange
	f.tree.AscendGreaterOrEqual(netipx.IPRangeFrom(r.From(), r.From()), func(iv netipx.IPRange) bool {
		if r.To().Less(iv.From()) {
			return false
		}
		overlapping = append(overlapping, iv)
		return true
	})
	removed := new(big.Int)
	for _, iv := range overlapping {
		f.tree.Delete(iv)
		from, to := iv.From(), iv.To()
		if from.Less(r.From()) {
			f.tree.ReplaceOrInsert(netipx.IPRangeFrom(from, r.From().Prev()))
			from = r.From()
		}
		if r.To().Less(to) {
			f.tree.ReplaceOrInsert(netipx.IPRangeFrom(r.To().Next(), to))
			to = r.To()
		}
		removed.Add(removed, Size(netipx.IPRangeFrom(from, to)))
	}
	return removed
}

// putRange makes every address of r free, merging it with the intervals
// around it, and returns how many of them were not free before.
func (f freeSet) putRange(r netipx.IPRange) *big.Int {
	gained := Size(r)
	gained.Sub(gained, f.removeRange(r))
	merged := r
	if below, ok := f.endingAt(r.From().Prev()); ok {
		f.tree.Delete(below)
		merged = netipx.IPRangeFrom(below.From(), merged.To())
	}
	if above, ok := f.containing(r.To().Next()); ok {
		merged = netipx.IPRangeFrom(merged.From(), above.To())
	}
	f.tree.ReplaceOrInsert(merged)
	return gained
}
