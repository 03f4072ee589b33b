package registry

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

// Acquire returns the address the claim holds in the pool, with the subnet
// it is handed out with. A claim that holds none gets the requested address
// when one is given (a zero Addr asks for none), else the lowest free one.
// Like every door of the controllers, it is guarded by the fence.
func (r *Registry) Acquire(ctx context.Context, pool v1alpha1.Pool, claim Claim, requested netip.Addr) (ip netip.Addr, subnet cidr.Subnet, err error) {
	err = r.guarded(func() error {
		ip, subnet, err = r.acquire(ctx, pool, claim, requested)
		return err
	})
	if err != nil {
		return netip.Addr{}, cidr.Subnet{}, err
	}
	return ip, subnet, nil
}

// acquire is Acquire within the fence.
func (r *Registry) acquire(ctx context.Context, pool v1alpha1.Pool, claim Claim, requested netip.Addr) (netip.Addr, cidr.Subnet, error) {
	for {
		var (
			ps     *poolState
			ip     netip.Addr
			subnet cidr.Subnet
			holds  bool
		)
		var confirmed bool
		err := r.withPool(ctx, pool, func(p *poolState) error {
			ps = p
			var err error
			if ip, holds = p.byClaim[claim]; holds {
				confirmed = !p.domain.allocates || p.confirmedRecently(claim, ip, r.now(), r.grace)
				subnet, err = p.subnetOf(ip)
				return err
			}
			ip, err = p.takeFree(requested, claim)
			return err
		})
		if err != nil || (holds && confirmed) {
			return ip, subnet, err
		}
		if holds {
			// Its IPAddress is created again (an earlier creation failed):
			// the record must outlive the creation (see Reap).
			retry, err := r.reconfirm(ctx, ps, claim, ip)
			if !retry {
				return ip, subnet, err
			}
			continue
		}
		subnet, retry, err := r.record(ctx, ps, claim, ip, requested)
		if !retry {
			return ip, subnet, err
		}
	}
}

// reconfirm confirms the record of ip, the address the claim holds, before
// its IPAddress is created again. retry says that another claim has it
// now (its record was reaped meanwhile): the claim must take another.
func (r *Registry) reconfirm(ctx context.Context, ps *poolState, claim Claim, ip netip.Addr) (retry bool, err error) {
	d, holder := ps.domain, ps.holder(claim)
	owner, mine, err := outcome(holder, r.store.Confirm(ctx, d.key, Record{Address: ip, Holder: holder}))
	if err != nil {
		return false, fmt.Errorf("recording address %s: %w", ip, err)
	}
	d.locked(func() {
		if mine {
			ps.markConfirmed(claim, ip, r.now())
			return
		}
		d.held.set(ip, owner)
		if ps.byClaim[claim] == ip {
			delete(ps.byClaim, claim)
		}
	})
	return !mine, nil
}

// takeFree takes an address for the claim in memory: the requested one, or
// the lowest free one. The caller holds the domain's lock.
func (ps *poolState) takeFree(requested netip.Addr, claim Claim) (netip.Addr, error) {
	if err := ps.ready(); err != nil {
		return netip.Addr{}, err
	}
	if ps.elsewhere != nil {
		return netip.Addr{}, fmt.Errorf("%w: %w", ErrPoolNotReady, ps.elsewhere)
	}
	ip, err := ps.pick(requested, claim)
	if err != nil {
		return netip.Addr{}, err
	}
	ps.domain.take(ip, ps.holder(claim))
	return ip, nil
}

// record creates the record of ip, which takeFree took for the claim, and
// gives the claim the address. retry says that the address was someone
// else's, or the pool left its domain meanwhile, and another must be taken.
// The record is created with the domain unlocked (store I/O is slow, and
// the domain's other claims go on meanwhile): ip is taken in memory, so no
// claim of this process is served it in between. In a mixed domain the
// record is checked after it is created (see written).
func (r *Registry) record(ctx context.Context, ps *poolState, claim Claim, ip, requested netip.Addr) (subnet cidr.Subnet, retry bool, err error) {
	d := ps.domain
	holder := ps.holder(claim)
	rec := Record{Address: ip, Holder: holder}
	created := r.written(ctx, d, d.key, rec, false)
	var overlap *overlapError
	owner, mine, err := outcome(holder, created)
	if errors.As(err, &overlap) {
		err = nil
	}
	var left bool
	d.locked(func() {
		switch {
		case overlap != nil:
			// Another claim's record overlaps the one created and
			// deleted: its span is taken here, the claim takes other space.
			d.backOff(ip, holder, overlap.other)
			if requested.IsValid() {
				err = unavailable(ps.key, requested, overlap.other.Holder, claim)
			}
			retry = err == nil
		case err != nil:
			if h, _ := d.held.get(ip); h == holder {
				d.give(ip)
			}
			err = fmt.Errorf("recording address %s: %w", ip, err)
		case !mine:
			// Held elsewhere, unknown to this process: it stays taken here.
			d.held.set(ip, owner)
			if requested.IsValid() {
				err = unavailable(ps.key, requested, owner, claim)
			}
			retry = err == nil
		case ps.left:
			left = true
		default:
			ps.byClaim[claim] = ip
			ps.markConfirmed(claim, ip, r.now())
			subnet, err = ps.subnetOf(ip)
		}
	})
	if left {
		// The pool moved to another domain meanwhile: this record belongs
		// to the old one.
		if err := r.unreserve(ctx, d.key, ip, holder); err != nil {
			return cidr.Subnet{}, false, err
		}
		return cidr.Subnet{}, true, nil
	}
	return subnet, retry, err
}

// Adopt records an address that already has an IPAddress of the claim, and
// fails with ErrConflict if the address is another claim's: the sign of a
// duplicate that must be surfaced, not papered over. An address the claim
// held in the registry and its IPAddress does not name (a race it lost) is
// given back.
func (r *Registry) Adopt(ctx context.Context, pool v1alpha1.Pool, claim Claim, ip netip.Addr) error {
	return r.guarded(func() error { return r.adopt(ctx, pool, claim, ip) })
}

// adopt is Adopt within the fence.
func (r *Registry) adopt(ctx context.Context, pool v1alpha1.Pool, claim Claim, ip netip.Addr) error {
	var (
		ps     *poolState
		verify bool
		prev   netip.Addr
	)
	err := r.withPool(ctx, pool, func(p *poolState) error {
		ps = p
		h, ok := p.domain.held.get(ip)
		// Memory may be stale (another process recorded or released the
		// address): in a domain that keeps records, the record decides.
		if verify = (!ok || !h.Claim.Same(claim)) && p.domain.allocates; !verify {
			if !ok {
				p.domain.take(ip, p.holder(claim))
			}
			prev = p.assign(claim, ip)
		}
		return nil
	})
	if err != nil {
		return err
	}
	d := ps.domain
	holder := ps.holder(claim)
	if verify {
		recorded := r.store.Reserve(ctx, d.key, Record{Address: ip, Holder: holder})
		if recorded == nil {
			// No record held the address: the IPAddress was made
			// elsewhere, past the webhook (see Admit), and only an
			// address the pool hands out is taken in.
			var err error
			d.locked(func() { err = ps.handsOut(ip) })
			if err != nil {
				return errors.Join(err, r.unreserve(ctx, d.key, ip, holder))
			}
		}
		owner, mine, err := outcome(holder, recorded)
		if err != nil {
			return fmt.Errorf("recording address %s: %w", ip, err)
		}
		if err := ps.settle(ip, holder, owner, mine, func() { prev = ps.assign(claim, ip) }); err != nil {
			return err
		}
	}
	if !prev.IsValid() {
		return nil
	}
	return r.unreserve(ctx, d.key, prev, holder)
}

// handsOut says why the pool does not hand out ip (see handsOut). The
// caller holds the domain's lock.
func (ps *poolState) handsOut(ip netip.Addr) error {
	if err := ps.ready(); err != nil {
		return err
	}
	return handsOut(ps.key, ps.space, ip)
}

// settle takes ip in memory for whom the store says holds it: holder when
// mine, and then runs apply, else owner, and then fails with ErrConflict.
func (ps *poolState) settle(ip netip.Addr, holder, owner Holder, mine bool, apply func()) error {
	d := ps.domain
	d.locked(func() {
		if !mine {
			d.take(ip, owner)
			return
		}
		d.take(ip, holder)
		apply()
	})
	if !mine {
		return conflict(ps.key, ip, owner, holder.Claim)
	}
	return nil
}

// assign gives the claim ip in the pool, and gives back in memory the
// address it held before, which it returns (a zero Addr when there was
// none, or it was ip). The caller holds the domain's lock.
func (ps *poolState) assign(claim Claim, ip netip.Addr) netip.Addr {
	prev, had := ps.byClaim[claim]
	ps.byClaim[claim] = ip
	if !had || prev == ip {
		return netip.Addr{}
	}
	ps.domain.give(prev)
	return prev
}

// HolderOf names the claim that holds ip in the pool when the claim given
// has no UID and the holder has its namespace and name: the garbage
// collector strips an IPAddress's owner reference to its deleted claim, and
// with it the UID the claim's record names. Otherwise it returns claim.
func (r *Registry) HolderOf(key poolref.Key, claim Claim, ip netip.Addr) Claim {
	r.mu.Lock()
	ps, ok := r.pools[key]
	r.mu.Unlock()
	if !ok || claim.UID != "" {
		return claim
	}
	ps.domain.locked(func() { claim = ps.holderOf(claim, ip) })
	return claim
}

// holderOf is HolderOf with the domain locked.
func (ps *poolState) holderOf(claim Claim, ip netip.Addr) Claim {
	if h, held := ps.domain.held.get(ip); held && claim.UID == "" && h.Pool == ps.key && h.Claim.NamespacedName == claim.NamespacedName {
		return h.Claim
	}
	return claim
}

// Release frees every address the claim holds. It returns the pools that
// gained a free address. The caller must have made sure the claim's
// IPAddress is gone. The store is told the addresses the claim holds in
// the pool's domain, when its domain allocates, so that it frees their
// records by name.
func (r *Registry) Release(ctx context.Context, key poolref.Key, claim Claim) ([]poolref.Key, error) {
	r.mu.Lock()
	ps, ok := r.pools[key]
	r.mu.Unlock()
	var (
		domain string
		held   []netip.Addr
	)
	if ok && ps.domain.allocates {
		domain = ps.domain.key
		ps.domain.locked(func() {
			for _, ip := range ps.domain.held.of(claim) {
				if h, _ := ps.domain.held.get(ip); !h.Retired {
					held = append(held, ip)
				}
			}
		})
	}
	if err := r.store.Free(ctx, claim, domain, held); err != nil {
		return nil, fmt.Errorf("deleting the records of claim %s: %w", claim.NamespacedName, err)
	}
	if !ok {
		return nil, nil
	}
	var gained []poolref.Key
	d := ps.domain
	d.locked(func() {
		delete(ps.byClaim, claim)
		delete(ps.confirmed, claim)
		for _, ip := range d.held.of(claim) {
			if h, _ := d.held.get(ip); !h.Retired {
				gained = append(gained, d.give(ip)...)
			}
		}
	})
	return gained, nil
}
