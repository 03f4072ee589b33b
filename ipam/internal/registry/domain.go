package registry

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

// domain is a set of pools that must never hand out the same address.
type domain struct {
	key string
	// allocates is false for the domain of a pool whose spec.vrf has not
	// resolved: it knows what the pool holds, and hands out nothing.
	allocates bool

	// mu guards domainGuarded and the poolGuarded of the domain's pools.
	// Only locked takes it, so that every lock is released in the function
	// that took it.
	mu sync.Mutex
	domainGuarded
}

// domainGuarded is what domain.mu guards in a domain.
type domainGuarded struct {
	// held is every address in use in the domain and its holder; nil until
	// the domain is seeded.
	held  *holdings
	pools map[poolref.Key]*poolState
	// handedOver says why no pool of the domain hands out addresses here
	// since one of them was handed over (see Registry.HandOver), or is nil.
	handedOver error
	// mixed: the domain's marker said that its records have spans of more
	// than one length (see overlap.go).
	mixed bool
}

func newDomain(key string, allocates bool) *domain {
	return &domain{key: key, allocates: allocates, domainGuarded: domainGuarded{pools: map[poolref.Key]*poolState{}}}
}

// locked runs fn with the domain locked. fn must not call the store, but
// for seeding (see Registry.prepare): store I/O is slow, and every claim of
// the domain waits for the lock.
func (d *domain) locked(fn func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fn()
}

// poolState is what the registry knows of one pool. key, uid and domain are
// fixed at creation (a pool that moves to another domain gets a new one).
type poolState struct {
	key    poolref.Key
	uid    types.UID
	domain *domain
	// latest is the newest read of the pool seen; only find replaces it,
	// under index.mu, and prepare reads it under the domain's lock.
	latest atomic.Pointer[v1alpha1.Pool]

	poolGuarded
}

// poolGuarded is what the pool's domain.mu guards in a poolState.
type poolGuarded struct {
	// left is set when the pool left its domain.
	left bool
	// handedOver is set once HandOver stopped the pool here, before the
	// pool's annotations say so.
	handedOver bool
	// elsewhere says why the pool hands out nothing here (allocatesHere
	// of the read it was built from), or is nil.
	elsewhere error
	// built is the read the allocator was built from; nil until seeded.
	built v1alpha1.Pool
	// alloc (a pool of addresses) or prefixes (a prefix pool), and space,
	// are nil while the pool does not resolve; spaceErr says why.
	alloc    *cidr.Allocator
	prefixes *poolspace.PrefixAllocator
	space    *poolspace.Space
	spaceErr error
	// byClaim maps the pool's claims to their addresses; nil until seeded.
	byClaim map[Claim]netip.Addr
	// confirmed says when this process last created or confirmed the
	// record of a claim's address in byClaim (see confirmedRecently).
	confirmed map[Claim]confirmation
}

// confirmation is when the record of an address was last written.
type confirmation struct {
	address netip.Addr
	at      time.Time
}

// take records that h holds ip (with the prefix it starts, for a claim of
// a prefix pool), and marks it taken in every pool of the domain that could
// hand it out, or a prefix holding it: a pool of addresses and a prefix
// pool over the same space never hand out one address twice.
func (d *domain) take(ip netip.Addr, h Holder) {
	d.held.set(ip, h)
	for _, ps := range d.pools {
		ps.taken(ip, h)
	}
}

// taken marks what h holds from ip on taken in the pool's allocator.
func (ps *poolState) taken(ip netip.Addr, h Holder) {
	switch {
	case !ps.ofFamily(ip):
		// A VRF holds both families, a pool one: the other's holdings
		// are nothing to it (and a prefix number of the other family
		// could read as one of its own).
	case ps.prefixes != nil:
		ps.prefixes.Take(h.span(ip))
	case ps.alloc != nil && h.Bits == 0:
		_ = ps.alloc.Allocate(ip) // not in the space, or taken already: nothing to do
	case ps.alloc != nil:
		ps.alloc.TakeRange(h.span(ip))
	}
}

// give undoes take, and returns the pools that gained a free address.
func (d *domain) give(ip netip.Addr) []poolref.Key {
	h, _ := d.held.get(ip)
	d.held.remove(ip)
	span := h.span(ip)
	var gained []poolref.Key
	for key, ps := range d.pools {
		switch {
		case !ps.ofFamily(ip):
		case ps.prefixes != nil:
			// A prefix of the pool is free once nothing else is held
			// in it: what is, is taken again.
			ps.prefixes.Give(span)
			d.held.within(ps.space.Prefixes.Span(span), func(other netip.Addr, o Holder) { ps.prefixes.Take(o.span(other)) })
			if ps.space.Prefixes.Contains(ps.space.Prefixes.PrefixOf(ip)) {
				gained = append(gained, key)
			}
		case ps.alloc != nil && h.Bits == 0:
			if ps.alloc.Release(ip) == nil {
				gained = append(gained, key)
			}
		case ps.alloc != nil:
			ps.alloc.GiveRange(span)
			gained = append(gained, key)
		}
	}
	return gained
}

// leave drops a pool's state from the domain and frees in memory what it
// held there; its records stay until its claims release them.
func (d *domain) leave(ps *poolState) {
	d.locked(func() {
		ps.left = true
		if d.pools[ps.key] != ps {
			return
		}
		delete(d.pools, ps.key)
		for ip, h := range d.held.all() {
			if h.Pool == ps.key {
				d.give(ip)
			}
		}
	})
}

// rebuild resolves the pool's spec and sources into a fresh allocator
// holding every address in use in the domain.
func (ps *poolState) rebuild(pool v1alpha1.Pool) {
	ps.built = pool
	space, errs := poolspace.Resolve(pool.PoolSpec(), pool.PoolStatus().Resolved)
	if len(errs) > 0 {
		ps.alloc, ps.prefixes, ps.space, ps.spaceErr = nil, nil, nil, errs.ToAggregate()
		return
	}
	ps.space, ps.spaceErr = space, nil
	if space.Prefixes != nil {
		ps.alloc, ps.prefixes = nil, poolspace.NewPrefixAllocator(space.Prefixes)
		for ip, h := range ps.domain.held.all() {
			ps.taken(ip, h)
		}
		return
	}
	ps.alloc, ps.prefixes = cidr.NewAllocator(space.Space), nil
	var single []netip.Addr
	for ip, h := range ps.domain.held.all() {
		if h.Bits == 0 {
			single = append(single, ip)
		} else {
			ps.taken(ip, h)
		}
	}
	ps.alloc.Seed(single)
}

// holder is the claim as a holder of the pool's addresses or prefixes.
func (ps *poolState) holder(claim Claim) Holder {
	return Holder{Pool: ps.key, Claim: claim, Bits: poolspace.PrefixLength((*ps.latest.Load()).PoolSpec())}
}

// errVRFUnread is why a pool whose VRF was not read yet serves nothing.
var errVRFUnread = fmt.Errorf("%w: spec.vrf has not been read with the pool's credentials yet (see the SourcesResolved condition)", ErrPoolNotReady)

// ready says why the pool cannot hand out addresses, or nil.
func (ps *poolState) ready() error {
	switch {
	case !ps.domain.allocates:
		return errVRFUnread
	case ps.alloc == nil && ps.prefixes == nil:
		return fmt.Errorf("%w: %w", ErrPoolNotReady, ps.spaceErr)
	}
	return nil
}

// subnetOf returns the subnet ip is handed out with.
func (ps *poolState) subnetOf(ip netip.Addr) (cidr.Subnet, error) {
	if ps.space == nil {
		return cidr.Subnet{}, ps.ready()
	}
	if ps.prefixes != nil {
		// A prefix is a subnet of its own; the gateway of the subnet it
		// is carved from is not its hosts'.
		return cidr.Subnet{Prefix: ps.space.Prefixes.PrefixOf(ip)}, nil
	}
	subnet, _ := ps.space.SubnetOf(ip)
	return subnet, nil
}

// pick takes the requested address, or the lowest free one when none is
// requested, in the pool's allocator: in a prefix pool, the first address
// of the requested prefix, or of the lowest free one.
func (ps *poolState) pick(requested netip.Addr, claim Claim) (netip.Addr, error) {
	switch {
	case !requested.IsValid() && ps.prefixes != nil:
		prefix, err := ps.prefixes.Next()
		return prefix.Addr(), err
	case !requested.IsValid():
		return ps.alloc.Next()
	}
	if h, ok := ps.domain.held.get(requested); ok {
		return netip.Addr{}, unavailable(ps.key, requested, h, claim)
	}
	if ps.prefixes == nil {
		if err := ps.alloc.Allocate(requested); !errors.Is(err, cidr.ErrNotAllocatable) {
			return requested, err
		}
		return netip.Addr{}, fmt.Errorf("%w: requested address %s is not one the pool hands out: it lies outside its addresses, or is a gateway, network, broadcast, anycast or excluded address",
			ErrRequestedUnavailable, requested)
	}
	if err := ps.prefixes.Allocate(netip.PrefixFrom(requested, ps.space.Prefixes.Bits())); !errors.Is(err, cidr.ErrNotAllocatable) {
		return requested, err
	}
	return netip.Addr{}, fmt.Errorf("%w: requested address %s is not the first address of a /%d the pool hands out: it lies outside its addresses, or its prefix holds a gateway or an excluded address",
		ErrRequestedUnavailable, requested, ps.space.Prefixes.Bits())
}

// ofFamily reports whether ip is of the family of the pool's space (nil
// while the pool does not resolve: nothing is taken in it then).
func (ps *poolState) ofFamily(ip netip.Addr) bool {
	return ps.space != nil && cidr.FamilyOf(ip) == ps.space.Family()
}
