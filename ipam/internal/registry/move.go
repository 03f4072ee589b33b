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

// Admit records the address of an IPAddress of the claim that another
// writer (clusterctl move, a restore) is about to create, from the
// IPAddress webhook, and fails with ErrConflict if another claim holds it.
// The record is pending until the IPAddress exists (see "The life of a
// record"): a claim has at most MaxPending such records (*PendingError),
// and Reap deletes them if the creation fails. A record the claim has
// already is confirmed. Unlike Adopt it gives back no other address of the
// claim: the creation may still fail (another replica created the claim's
// IPAddress first, with the address it holds).
//
// Only an address the pool hands out is admitted (ErrNotInPool): no
// gateway, network, broadcast, anycast or excluded address, none outside
// its addresses. A VRF pool whose VRF was not read yet refuses it with
// ErrPoolNotReady: a domain that does not allocate keeps no records. A
// pool whose addresses in use were not read yet (after a restart or a
// failover) is not seeded here, which can take longer than the API server
// waits for a webhook: the record is created in the store alone, which the
// seeding reads.
func (r *Registry) Admit(ctx context.Context, pool v1alpha1.Pool, claim Claim, ip netip.Addr) error {
	if r.fenced() != nil {
		return r.admitInStore(ctx, pool, claim, ip)
	}
	var (
		ps    *poolState
		kept  netip.Addr
		fresh bool
	)
	err := r.with(ctx, pool, false, func(p *poolState) error {
		ps = p
		if !p.domain.allocates {
			return errVRFUnread
		}
		// The claim's own address, recorded here lately: the manager's own
		// IPAddress, where the webhook is called for it too.
		kept = p.byClaim[claim]
		if fresh = kept == ip && p.confirmedRecently(claim, ip, r.now(), r.grace); fresh {
			return nil
		}
		return p.handsOut(ip)
	})
	if errors.Is(err, errUnseeded) {
		return r.admitInStore(ctx, pool, claim, ip)
	}
	if err != nil || fresh {
		return err
	}
	d := ps.domain
	if err := r.bound(ctx, d.key, ps.key, claim, ip, kept); err != nil {
		return err
	}
	holder := ps.holder(claim)
	owner, mine, err := r.admitRecord(ctx, d, d.key, ip, holder)
	var overlap *overlapError
	if errors.As(err, &overlap) {
		d.locked(func() { d.take(overlap.other.Address, overlap.other.Holder) })
		return conflict(ps.key, ip, overlap.other.Holder, claim)
	}
	if err != nil {
		return fmt.Errorf("recording address %s: %w", ip, err)
	}
	return ps.settle(ip, holder, owner, mine, func() {
		if _, had := ps.byClaim[claim]; !had {
			ps.byClaim[claim] = ip
		}
	})
}

// handsOut says why the pool key, of the given space, does not hand out
// ip: it lies outside its addresses, or is reserved (a gateway, network,
// broadcast, anycast or excluded address). Every door through which an
// address made elsewhere comes in (moved, restored, or written by a user)
// keeps out what allocation never hands out.
func handsOut(key poolref.Key, space *poolspace.Space, ip netip.Addr) error {
	if space.HandsOut(ip) {
		return nil
	}
	if space.Prefixes != nil {
		return fmt.Errorf("%w: %s does not hand out %s: it is not the first address of a /%d of the pool's addresses holding no gateway nor excluded address",
			ErrNotInPool, key, ip, space.Prefixes.Bits())
	}
	return fmt.Errorf("%w: %s does not hand out %s: it lies outside the pool's addresses, or is a gateway, network, broadcast, anycast or excluded address",
		ErrNotInPool, key, ip)
}

// Retire keeps ip out of use for good when the claim's IPAddress holding it
// lost its claim to clusterctl move: move deletes the claims of a global
// pool's IPAddresses and leaves the IPAddresses, whose addresses live on in
// the target cluster. The caller decides it was a move (the address
// reconciler: the claim's Cluster is gone too); any other IPAddress left
// without its claim is released, never retired, or whoever may delete a
// claim could keep a shared pool's addresses out of use for good. The
// record stays, marked retired, until the pool is deleted; the caller then
// deletes the IPAddress. An address with no
// record yet gets a retired one. A pool whose spec.vrf has not resolved has
// no records: it fails with ErrPoolNotReady, and the IPAddress must wait.
//
// A claim without a UID stands for the claim of its name, whatever its UID
// was: the IPAddress no longer names it (the garbage collector strips an
// owner reference to a deleted claim, and the pool's keeps the IPAddress),
// and the caller found no claim of that name. retired is false when the
// record is another claim's: nothing of the IPAddress's is kept then.
func (r *Registry) Retire(ctx context.Context, pool v1alpha1.Pool, claim Claim, ip netip.Addr) (retired bool, err error) {
	err = r.guarded(func() error {
		retired, err = r.retire(ctx, pool, claim, ip)
		return err
	})
	return retired, err
}

// retire is Retire within the fence.
func (r *Registry) retire(ctx context.Context, pool v1alpha1.Pool, claim Claim, ip netip.Addr) (bool, error) {
	var (
		ps                      *poolState
		recorded, done, retired bool
		holder                  Holder
	)
	err := r.withPool(ctx, pool, func(p *poolState) error {
		ps = p
		if !p.domain.allocates {
			// Without records a retired address would be free again
			// after a restart.
			return p.ready()
		}
		h, held := p.domain.held.get(ip)
		holder, recorded = p.holder(p.holderOf(claim, ip)), held
		// Retired already, or not this claim's: nothing of it to keep.
		retired = held && h.Retired && h.Claim.Same(holder.Claim)
		done = held && (h.Retired || !h.Claim.Same(holder.Claim))
		return nil
	})
	if err != nil || done {
		return retired, err
	}
	d := ps.domain
	if !recorded {
		owner, mine, err := outcome(holder, r.store.Reserve(ctx, d.key, Record{Address: ip, Holder: holder}))
		if err != nil {
			return false, fmt.Errorf("recording address %s: %w", ip, err)
		}
		if !mine {
			d.locked(func() { d.take(ip, owner) })
			return false, nil
		}
	}
	if err := r.store.Retire(ctx, d.key, Record{Address: ip, Holder: holder}); err != nil {
		return false, fmt.Errorf("retiring the record of address %s: %w", ip, err)
	}
	claim = holder.Claim
	holder.Retired = true
	d.locked(func() {
		d.take(ip, holder)
		if ps.byClaim[claim] == ip {
			delete(ps.byClaim, claim)
			delete(ps.confirmed, claim)
		}
	})
	return true, nil
}

// HandOver stops the pool, and every pool of its domain, from handing out
// addresses in this management cluster, if no claim here holds an address
// of the domain; it returns how many addresses claims of each namespace
// hold otherwise, and then changes nothing. Every address counts: of any
// pool of the domain (the taking cluster hands out the domain's addresses),
// recorded or still being recorded for a claim that was not served yet.
func (r *Registry) HandOver(ctx context.Context, pool v1alpha1.Pool) (map[string]int, error) {
	holders := map[string]int{}
	err := r.withPool(ctx, pool, func(ps *poolState) error {
		d := ps.domain
		for _, h := range d.held.all() {
			if !h.Retired {
				holders[h.Claim.Namespace]++
			}
		}
		if len(holders) == 0 {
			ps.handedOver = true
			ps.elsewhere = allocatesHere(ps.built, r.cluster, true)
			d.handOver(pool)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return holders, nil
}

// allocatesHere says why the pool hands out nothing in management cluster
// cluster, or returns nil. Only a GlobalMetalVRFIPPool can be elsewhere:
// clusterctl move copies it and leaves the source's copy, while a namespaced
// pool moves whole. A pool without the annotation waits for its manager to
// set it, so that no copy made before can allocate too.
func allocatesHere(pool v1alpha1.Pool, cluster string, handedOver bool) error {
	if poolref.KindOf(pool) != v1alpha1.GlobalMetalVRFIPPoolKind {
		return nil
	}
	annotations := pool.GetAnnotations()
	allocating := annotations[v1alpha1.AllocatingClusterAnnotation]
	switch {
	case handedOver || handedOverFrom(pool, cluster):
		return fmt.Errorf("%s %q was handed over to another management cluster and hands out nothing here", v1alpha1.GlobalMetalVRFIPPoolKind, pool.GetName())
	case allocating == "":
		return fmt.Errorf("%s %q has no annotation %s yet (its manager names its own cluster unless IPAddresses of the pool were handed out by another: event %s)",
			v1alpha1.GlobalMetalVRFIPPoolKind, pool.GetName(), v1alpha1.AllocatingClusterAnnotation, v1alpha1.AllocatorInDoubtReason)
	case allocating != cluster:
		return fmt.Errorf("%s %q allocates in management cluster %s (annotation %s): this copy keeps the addresses of its claims and hands out none until it is taken over (docs/install.md, \"Moving a cluster\")",
			v1alpha1.GlobalMetalVRFIPPoolKind, pool.GetName(), allocating, v1alpha1.AllocatingClusterAnnotation)
	}
	return nil
}

// handedOverFrom says whether a GlobalMetalVRFIPPool's annotations say it
// was handed over from management cluster cluster.
func handedOverFrom(pool v1alpha1.Pool, cluster string) bool {
	_, tokened := pool.GetAnnotations()[v1alpha1.HandoverTokenAnnotation]
	return poolref.KindOf(pool) == v1alpha1.GlobalMetalVRFIPPoolKind && tokened && pool.GetAnnotations()[v1alpha1.AllocatingClusterAnnotation] == cluster
}

// handOver stops every pool of the domain from handing out addresses here,
// pool having been handed over. The caller holds the domain's lock.
func (d *domain) handOver(pool v1alpha1.Pool) {
	d.handedOver = fmt.Errorf("%s %q of the same VRF was handed over to another management cluster: no pool of the VRF hands out addresses here",
		v1alpha1.GlobalMetalVRFIPPoolKind, pool.GetName())
}
