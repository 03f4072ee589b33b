package registry

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
)

// fenced says why this process may not allocate now, or returns nil.
func (r *Registry) fenced() error {
	if r.fence == nil {
		return nil
	}
	return r.fence()
}

// guarded runs op, a door of the controllers (which run in the leader
// alone), unless this process may not allocate now. It fails with
// ErrFenced when the fence says so before op, and when op failed and the
// fence says so after it: a process deposed in between (frozen after the
// first question) has its record refused by the API server
// (config/ipam/fence), and the answer then says why. Only the fence is
// wrapped: a deposed process must not mark a claim with what its refused
// write ran into.
func (r *Registry) guarded(op func() error) error {
	if err := r.fenced(); err != nil {
		return err
	}
	err := op()
	if err != nil {
		if fenced := r.fenced(); fenced != nil {
			return fmt.Errorf("%w (%s)", fenced, err.Error())
		}
	}
	return err
}

// admitInStore is Admit in a replica that may not allocate now, or for a
// pool not seeded yet: it leaves its memory alone (only the allocating
// replica keeps it current; seeding reads the store) and asks the store
// alone.
func (r *Registry) admitInStore(ctx context.Context, pool v1alpha1.Pool, claim Claim, ip netip.Addr) error {
	key, allocates := domainOf(pool)
	if !allocates {
		return errVRFUnread
	}
	space, errs := poolspace.Resolve(pool.PoolSpec(), pool.PoolStatus().Resolved)
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrPoolNotReady, errs.ToAggregate())
	}
	if err := handsOut(poolref.KeyOf(pool), space, ip); err != nil {
		return err
	}
	holder := Holder{Pool: poolref.KeyOf(pool), Claim: claim, Bits: poolspace.PrefixLength(pool.PoolSpec())}
	if err := r.bound(ctx, key, holder.Pool, claim, ip, netip.Addr{}); err != nil {
		return err
	}
	// Not seeded here, it knows nothing of the domain: the marker tells
	// (see written).
	owner, mine, err := r.admitRecord(ctx, nil, key, ip, holder)
	var overlap *overlapError
	switch {
	case errors.As(err, &overlap):
		return conflict(holder.Pool, ip, overlap.other.Holder, claim)
	case err != nil:
		return err
	case !mine:
		return conflict(holder.Pool, ip, owner, claim)
	}
	return nil
}
