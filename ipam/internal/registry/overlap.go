package registry

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
)

// A record's name is its first address's, so the API server refuses a
// second record of one address, and of one prefix of one length. It does not
// refuse an address and a prefix holding it, nor two prefixes of different
// lengths: their records have different names. In a domain whose pools hold
// spans of more than one length (a VRF with an address pool and a prefix
// pool), a process that created a record therefore lists the domain's
// records live, and backs off, deleting its own, when another claim's
// record overlaps it.
//
// The one who sees backs off. Two writers A and B each create, then list.
// If A's list does not show B's record, A listed before B created, so B
// created after A did and B's list shows A's: at least one of two
// overlapping records is seen by its rival's writer, and that writer backs
// off. Both may see each other and both back off; neither keeps the space
// then, and each takes the other's span as held in memory, so their retries
// go elsewhere (a span released that way stays held in that process's memory
// until its claim is released). No clock and no order of resourceVersions
// is needed: a record confirmed (updated) since its creation would make
// either misleading.
//
// A domain with spans of one length (addresses only, or prefixes of one
// length) keeps its cost: one write per claim, no list.

// overlapError says that a record of another claim overlaps the one just
// created, which was deleted: the claim must take other space.
type overlapError struct{ other Record }

func (e *overlapError) Error() string {
	return fmt.Sprintf("address %s is held by claim %s", e.other.Address, e.other.Holder.Claim.NamespacedName)
}

// overlapping returns a record of others, held by another claim than mine's,
// whose span overlaps mine's: the rule of the check after create.
func overlapping(mine Record, others []Record) (Record, bool) {
	span := mine.Holder.span(mine.Address)
	for _, o := range others {
		if o.Holder.Claim.same(mine.Holder.Claim) {
			continue
		}
		if theirs := o.Holder.span(o.Address); theirs.From().Compare(span.To()) <= 0 && span.From().Compare(theirs.To()) <= 0 {
			return o, true
		}
	}
	return Record{}, false
}

// checkOverlap is the check after mine's record was created in a mixed
// domain: when another claim's record overlaps it, mine is deleted (unless
// keep) and an *overlapError names the other. It calls the store: the
// caller holds no lock.
func (r *Registry) checkOverlap(ctx context.Context, domain string, mine Record, keep bool) error {
	records, err := r.store.LiveRecords(ctx, domain)
	if err != nil {
		return fmt.Errorf("listing the records of the domain to check for overlaps: %w", err)
	}
	other, found := overlapping(mine, records)
	if !found {
		return nil
	}
	if !keep {
		if err := r.store.Unreserve(ctx, domain, mine); err != nil {
			return fmt.Errorf("backing off from %s, which overlaps %s's: %w", mine.Address, other.Holder.Claim.NamespacedName, err)
		}
	}
	return &overlapError{other: other}
}

// mixed reports whether the domain's pools hold spans of more than one
// length, so that records of different names can overlap. The caller holds
// the domain's lock.
func (d *domain) mixed() bool {
	first, seen := 0, false
	for _, ps := range d.pools {
		bits := poolspace.PrefixLength((*ps.latest.Load()).PoolSpec())
		switch {
		case !seen:
			first, seen = bits, true
		case bits != first:
			return true
		}
	}
	return false
}

// backOff undoes, in memory, the take of ip by holder and takes the other
// record's span instead, in every allocator of the domain even when its
// first address is held already: one held after a TakenError is marked in
// the allocators as the address tried, not as the other's span, and the
// retry must not pick inside it again. The caller holds the domain's lock.
func (d *domain) backOff(ip netip.Addr, holder Holder, other Record) {
	if h, _ := d.held.get(ip); h == holder {
		d.give(ip)
	}
	d.take(other.Address, other.Holder)
}
