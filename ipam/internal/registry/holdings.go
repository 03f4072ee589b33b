package registry

import (
	"iter"
	"maps"
	"net/netip"
	"slices"

	"github.com/google/btree"
	"go4.org/netipx"
)

// holdings is every address in use in a domain with its holder, indexed by
// claim as well, so that a release finds its claim's addresses without a
// scan of the domain (which holds up every other claim of the domain while
// it runs under the domain's lock). domain.mu guards it. A nil *holdings
// (a domain not seeded yet) reads as empty.
type holdings struct {
	byAddress map[netip.Addr]Holder
	// byClaim is a slice, not a set: a claim holds one address but for the
	// moment a move or a retirement overlaps, and a map per claim cost
	// about 300 bytes per address in use (docs/benchmarks.md, "The
	// manager's memory, out of process") where a one-address slice costs 24.
	byClaim map[Claim][]netip.Addr
	// ordered is the addresses of byAddress in order, for a prefix pool to
	// find what else is held inside a prefix (see within).
	ordered *btree.BTreeG[netip.Addr]
}

func newHoldings() *holdings {
	return &holdings{
		byAddress: map[netip.Addr]Holder{}, byClaim: map[Claim][]netip.Addr{},
		ordered: btree.NewG(32, netip.Addr.Less),
	}
}

// within calls fn with every holding whose first address lies in r, in
// order; fn may not change the holdings.
func (h *holdings) within(r netipx.IPRange, fn func(netip.Addr, Holder)) {
	if h == nil {
		return
	}
	h.ordered.AscendRange(r.From(), r.To(), func(ip netip.Addr) bool {
		fn(ip, h.byAddress[ip])
		return true
	})
	if holder, ok := h.byAddress[r.To()]; ok {
		fn(r.To(), holder) // AscendRange stops before its end
	}
}

// get returns the holder of ip.
func (h *holdings) get(ip netip.Addr) (Holder, bool) {
	if h == nil {
		return Holder{}, false
	}
	holder, ok := h.byAddress[ip]
	return holder, ok
}

// set makes holder the holder of ip, in place of any other.
func (h *holdings) set(ip netip.Addr, holder Holder) {
	h.remove(ip)
	h.byAddress[ip] = holder
	h.ordered.ReplaceOrInsert(ip)
	h.byClaim[holder.Claim] = append(h.byClaim[holder.Claim], ip) // remove took ip out of any
}

// remove forgets ip's holder.
func (h *holdings) remove(ip netip.Addr) {
	old, ok := h.byAddress[ip]
	if !ok {
		return
	}
	delete(h.byAddress, ip)
	h.ordered.Delete(ip)
	addrs := slices.DeleteFunc(h.byClaim[old.Claim], func(held netip.Addr) bool { return held == ip })
	if len(addrs) == 0 {
		delete(h.byClaim, old.Claim)
	} else {
		h.byClaim[old.Claim] = addrs
	}
}

// all is every address in use and its holder. Removing addresses meanwhile
// is allowed, as in a range over a map.
func (h *holdings) all() iter.Seq2[netip.Addr, Holder] {
	if h == nil {
		return maps.All(map[netip.Addr]Holder(nil))
	}
	return maps.All(h.byAddress)
}

// of is the addresses the claim holds, retired or not, collected first so
// that the caller may remove them meanwhile.
func (h *holdings) of(claim Claim) []netip.Addr {
	if h == nil {
		return nil
	}
	return slices.Clone(h.byClaim[claim])
}
