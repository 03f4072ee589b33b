package registry

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// A record is pending while no IPAddress names its address (see "The life
// of a record"): Admit recorded it and the creation failed after (another
// webhook or an admission policy refused it, an IPAddress of that name
// exists, the client gave up). Anyone allowed to create IPAddresses in a
// namespace could so make one of its claims hold any number of addresses;
// instead a claim has at most MaxPending pending records at once (Admit
// refuses more with ErrTooManyPending), and Reap deletes those a live read
// shows without their IPAddress once they are older than the grace period.
//
// A record is never reaped while its IPAddress may still be created: every
// writer of an IPAddress confirms its record first (the webhook for others'
// IPAddresses, Acquire for the manager's own, unless it wrote the record
// within half the grace period), which makes it young again and makes a
// reap that read it before fail (Store.Unreserve). The grace period outlasts
// any create request: the API server gives up on one after a minute.

// MaxPending is how many pending records a claim may have.
const MaxPending = 4

// DefaultPendingGrace is how old a pending record must be to be reaped.
const DefaultPendingGrace = 2 * time.Minute

// PendingError says that a claim has MaxPending pending records already.
type PendingError struct {
	Claim   Claim
	Pending []netip.Addr
	// Grace is how long after its last confirmation a pending record is reaped.
	Grace time.Duration
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("claim %s has %d addresses (%s) recorded for IPAddresses that were not created, the most it may have: no other is recorded for it until they are reaped, %s after they were recorded, or the claim is released",
		e.Claim.NamespacedName, len(e.Pending), joinAddrs(e.Pending), e.Grace)
}

// Is makes errors.Is(err, ErrTooManyPending) hold for a *PendingError.
func (e *PendingError) Is(target error) bool { return target == ErrTooManyPending }

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// SetPendingGrace sets how long after its last confirmation a pending
// record is reaped (DefaultPendingGrace by default). Call it before the
// registry is used.
func (r *Registry) SetPendingGrace(grace time.Duration) { r.grace = grace }

// PendingGrace is how long after its last confirmation a pending record is reaped.
func (r *Registry) PendingGrace() time.Duration { return r.grace }

// OnPending sets fn, called when Admit records an address for a claim that
// has others recorded: Reap should look at the claim once the grace period
// has passed. fn must not block. Call it before the registry is used.
func (r *Registry) OnPending(fn func(pool poolref.Key, claim Claim)) { r.onPending = fn }

// Reaped is what Reap did.
type Reaped struct {
	// Addresses are the addresses whose records were deleted.
	Addresses []netip.Addr
	// Gained are the pools that gained a free address.
	Gained []poolref.Key
	// Pending counts the pending records left; the oldest of them is
	// reaped RetryAfter from now at the earliest.
	Pending    int
	RetryAfter time.Duration
}

// Reap deletes the claim's pending records in the pool's domain that are
// older than the grace period, and frees their addresses. A record is
// pending when no IPAddress of the claim's namespace whose spec.claimRef
// names the claim has its address (whoever owns it), read live; the
// address the claim holds here, and retired records, are never reaped.
// Only a process that may allocate reaps: its memory is the one to free.
//
// gone says that no claim of the claim's name and UID exists, read live (an
// administrator's IPAddress for a claim that does not exist, refused after
// the webhook recorded it): then the address it holds here is reaped too,
// no claim will ever create its IPAddress. A record the webhook confirms
// meanwhile, for an IPAddress on its way, is kept (Store.Unreserve).
func (r *Registry) Reap(ctx context.Context, pool v1alpha1.Pool, claim Claim, gone bool) (Reaped, error) {
	if err := r.fenced(); err != nil {
		return Reaped{}, err
	}
	var (
		ps   *poolState
		kept netip.Addr
	)
	err := r.withPool(ctx, pool, func(p *poolState) error {
		ps, kept = p, p.byClaim[claim]
		return nil
	})
	if err != nil || !ps.domain.allocates {
		return Reaped{}, err
	}
	d := ps.domain
	records, err := r.store.ClaimRecords(ctx, d.key, claim)
	if err != nil {
		return Reaped{}, fmt.Errorf("reading the records of claim %s: %w", claim.NamespacedName, err)
	}
	if gone {
		kept = netip.Addr{}
	}
	pending, err := r.pending(ctx, claim, records, kept)
	if err != nil {
		return Reaped{}, err
	}
	var out Reaped
	now := r.now()
	for _, rec := range pending {
		if wait := rec.Recorded.Add(r.grace).Sub(now); rec.Recorded.IsZero() || wait > 0 {
			out.Pending++
			if out.Pending == 1 || wait < out.RetryAfter {
				out.RetryAfter = max(wait, 0)
			}
			continue
		}
		expired, err := r.store.Unreserve(ctx, d.key, rec)
		if err != nil {
			return out, fmt.Errorf("deleting the record of address %s: %w", rec.Address, err)
		}
		if !expired {
			// Confirmed meanwhile: its IPAddress may be on its way.
			out.Pending++
			out.RetryAfter = r.grace
			continue
		}
		var kept bool
		d.locked(func() {
			if kept = ps.byClaim[claim] == rec.Address; kept && gone {
				delete(ps.byClaim, claim)
				delete(ps.confirmed, claim)
				kept = false
			}
			if kept {
				return
			}
			if h, held := d.held.get(rec.Address); held && h.Claim.Same(claim) && !h.Retired {
				out.Gained = append(out.Gained, d.give(rec.Address)...)
			}
		})
		if kept {
			// The claim was given the address meanwhile: it keeps its record.
			if _, _, err := outcome(rec.Holder, r.store.Confirm(ctx, d.key, Record{Address: rec.Address, Holder: rec.Holder})); err != nil {
				return out, fmt.Errorf("recording address %s: %w", rec.Address, err)
			}
			continue
		}
		out.Addresses = append(out.Addresses, rec.Address)
	}
	return out, nil
}

// pending returns the claim's records, but the retired ones and those of
// the addresses in skip, whose address no IPAddress of the claim names,
// read live.
func (r *Registry) pending(ctx context.Context, claim Claim, records []Record, skip ...netip.Addr) ([]Record, error) {
	records = slices.DeleteFunc(slices.Clone(records), func(rec Record) bool {
		return rec.Holder.Retired || slices.Contains(skip, rec.Address)
	})
	if len(records) == 0 {
		return nil, nil
	}
	live, err := r.store.ClaimAddresses(ctx, claim)
	if err != nil {
		return nil, fmt.Errorf("reading the IPAddresses of claim %s: %w", claim.NamespacedName, err)
	}
	return slices.DeleteFunc(records, func(rec Record) bool { return slices.Contains(live, rec.Address) }), nil
}

// bound refuses, with a *PendingError, to record ip for the claim in the
// domain when the claim has MaxPending pending records already; kept is
// the address the claim holds here, if known. It tells OnPending's
// function of each new record, so that it is reaped if left pending.
func (r *Registry) bound(ctx context.Context, domain string, pool poolref.Key, claim Claim, ip, kept netip.Addr) error {
	records, err := r.store.ClaimRecords(ctx, domain, claim)
	if err != nil {
		return fmt.Errorf("reading the records of claim %s: %w", claim.NamespacedName, err)
	}
	others := 0
	for _, rec := range records {
		if rec.Address == ip {
			return nil // recorded already: confirming it takes nothing more
		}
		if !rec.Holder.Retired && rec.Address != kept {
			others++
		}
	}
	// Every new record may be pending: its IPAddress may not be created,
	// and a claim that does not exist never creates it (Reap's gone).
	r.onPending(pool, claim)
	if others < MaxPending {
		return nil // the live read below is needed only near the bound
	}
	pending, err := r.pending(ctx, claim, records, kept)
	if err != nil || len(pending) < MaxPending {
		return err
	}
	addrs := make([]netip.Addr, 0, len(pending))
	for _, rec := range pending {
		addrs = append(addrs, rec.Address)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return &PendingError{Claim: claim, Pending: addrs, Grace: r.grace}
}

// confirmedRecently reports whether this process created or confirmed the
// record of the claim's address ip within half the grace period: no reap
// deletes it before ip's IPAddress is created. The caller holds the
// domain's lock.
func (ps *poolState) confirmedRecently(claim Claim, ip netip.Addr, now time.Time, grace time.Duration) bool {
	c, ok := ps.confirmed[claim]
	return ok && c.address == ip && now.Sub(c.at) < grace/2
}

// markConfirmed notes that this process created or confirmed the record
// of the claim's address ip at now. The caller holds the domain's lock.
func (ps *poolState) markConfirmed(claim Claim, ip netip.Addr, now time.Time) {
	if ps.confirmed == nil {
		ps.confirmed = map[Claim]confirmation{}
	}
	ps.confirmed[claim] = confirmation{address: ip, at: now}
}
