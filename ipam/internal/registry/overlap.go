package registry

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// A record's name is its first address's, so the API server refuses a
// second record of one address, and of one prefix of one length. It does not
// refuse an address and a prefix holding it, nor two prefixes of different
// lengths: their records have different names. In a domain whose records
// have spans of more than one length (a VRF with an address pool and a
// prefix pool), a process that created a record therefore lists the
// domain's records live, and backs off, deleting its own, when another
// claim's record overlaps it.
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
// Which domain is mixed is a fact of the API server, not of a process's
// informer (which may not have shown it the VRF's first prefix pool yet, or
// never will: managers sharded by --watch-filter with a VRF's address pool
// in one shard and its prefix pool in another). Each domain of a VRF has a
// marker, one Lease beside its records, that says the span length of the
// records written since it exists, or "mixed" (see Marked): it goes from
// none to one length to mixed, never back. A writer that hands out space
// in a domain of a VRF (Acquire, Admit), after creating its record, unless
// the marker said mixed to its process before, marks the domain with its
// record's length (Store.Mark: one live GET, and a create or a patch when
// the marker lacks the length); when the marker says mixed, now or before,
// it lists and backs off as above.
//
// Why no overlap is left. Take A's record a of length La and B's record b
// of length Lb != La, overlapping. A mark that finds no mix leaves the
// marker saying its own length, and the marker never says La once it said
// Lb, nor the other way round: so A and B do not both find no mix, and one
// of them, say B, learned from the marker at some moment m that the domain
// is mixed. B lists after m, and after creating b. If A lists too, the rule
// above holds. If not, A's mark after creating a found no mix: it came
// before the marker turned mixed, so before m. Then a was created before
// B's list, which shows it: B backs off. Records of one length never
// overlap but by sharing a name, which the API server refuses. Reads and
// writes of one object are linearizable: no clock nor informer is needed,
// nor does it matter what a process's pools say.
//
// The doors that record IPAddresses that exist already (Adopt, seeding,
// Retire) neither mark nor check: they hand out no space.
//
// The marker is never deleted: a process that learned the domain is mixed
// stops reading it, and one created afresh could miss the mix. A marker left
// mixed after the domain's pools of one length are gone costs its writers
// one List per claim, what a mixed domain costs.
//
// The cost per claim, in a domain of a VRF: with spans of one length, one
// GET (and one create for the domain's first record); mixed, one List (and
// one GET and patch when it turns mixed, and one GET per process until it
// knows). A pool without a VRF is a domain alone, of one length: nothing.

// Mixed is what a domain's marker says once records of two span lengths
// marked it.
const Mixed = "mixed"

// Marked is what a domain's marker says once a record of span length bits
// marked it, when it said mark ("" for no marker), and whether the domain
// is mixed then.
func Marked(mark string, bits int) (next string, mixed bool) {
	if own := strconv.Itoa(bits); mark == "" || mark == own {
		return own, false
	}
	return Mixed, true
}

// written confirms rec's record in domain (Store.Confirm: the doors that
// hand out space record an address before its IPAddress is created) under
// the rule of the marker (above): it marks the domain with rec's length
// unless the marker said mixed to this process before, and in a mixed
// domain checks the record (see checkOverlap, and keep there). d is this
// process's state of the domain, or nil when it keeps none (see
// admitInStore). A record the claim had already (a retry after a failed
// mark or check) is marked and checked as one created now. It calls the
// store: the caller holds no lock.
func (r *Registry) written(ctx context.Context, d *domain, domain string, rec Record, keep bool) error {
	created := r.store.Confirm(ctx, domain, rec)
	var taken *TakenError
	had := errors.As(created, &taken) && taken.Holder.Claim.Same(rec.Holder.Claim)
	if created != nil && !had || !strings.HasPrefix(domain, vrfDomain) {
		return created // a pool without a VRF is a domain alone, of one length
	}
	mixed := false
	if d != nil {
		d.locked(func() { mixed = d.mixed })
	}
	if !mixed {
		var err error
		if mixed, err = r.store.Mark(ctx, domain, rec.Holder.Bits); err != nil {
			return fmt.Errorf("marking the span length of the domain: %w", err)
		}
		if mixed && d != nil {
			d.locked(func() { d.mixed = true })
		}
	}
	if mixed {
		if err := r.checkOverlap(ctx, domain, rec, keep); err != nil {
			return err
		}
	}
	return created
}

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
		if o.Holder.Claim.Same(mine.Holder.Claim) {
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
		if err := r.unreserve(ctx, domain, mine.Address, mine.Holder); err != nil {
			return fmt.Errorf("backing off from %s, which overlaps %s's: %w", mine.Address, other.Holder.Claim.NamespacedName, err)
		}
	}
	return &overlapError{other: other}
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
