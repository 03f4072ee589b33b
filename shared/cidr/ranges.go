package cidr

import (
	"math/big"
	"net/netip"
	"slices"

	"go4.org/netipx"
)

// Overlap reports the first pair of ranges that share an address, for
// rejecting pools whose entries overlap. "First" means the pair a nested loop
// over i < j would find first: the smallest i, then the smallest j. Invalid
// ranges overlap nothing.
//
// A pool may have thousands of entries and is validated on every admission
// request, so this runs in O(n log n): after sorting by start address, a range
// overlaps an earlier-sorted one exactly when it starts at or before the
// furthest end seen so far, and a later-sorted one exactly when the next
// range in that order (the lowest start after it) starts at or before its end.
func Overlap(ranges []netipx.IPRange) (i, j int, ok bool) {
	byStart := make([]int, 0, len(ranges))
	for k, r := range ranges {
		if r.IsValid() {
			byStart = append(byStart, k)
		}
	}
	slices.SortFunc(byStart, func(a, b int) int {
		return ranges[a].From().Compare(ranges[b].From())
	})

	overlaps := make([]bool, len(ranges))
	var reach netip.Addr // the furthest end among the ranges sorted before r
	for k, idx := range byStart {
		r := ranges[idx]
		if k > 0 && r.From().Compare(reach) <= 0 {
			overlaps[idx] = true
		}
		if k+1 < len(byStart) && ranges[byStart[k+1]].From().Compare(r.To()) <= 0 {
			overlaps[idx] = true
		}
		if k == 0 || reach.Less(r.To()) {
			reach = r.To()
		}
	}

	// The lowest flagged index i overlaps some j; that j is flagged too, so it
	// cannot be lower than i. One linear scan finds the smallest such j.
	for i, flagged := range overlaps {
		if !flagged {
			continue
		}
		for j := i + 1; j < len(ranges); j++ {
			if ranges[i].Overlaps(ranges[j]) {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}

// Size returns the number of addresses in r, exactly, even for the 2^128
// addresses of ::/0. An invalid range has size 0.
func Size(r netipx.IPRange) *big.Int {
	if !r.IsValid() {
		return new(big.Int)
	}
	from, to := r.From().As16(), r.To().As16()
	n := new(big.Int).SetBytes(to[:])
	n.Sub(n, new(big.Int).SetBytes(from[:]))
	return n.Add(n, big.NewInt(1))
}
