package controllers

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

// registry is the one place where addresses are handed out and taken back.
//
// The reference in-cluster provider lists every IPAddress of a pool and
// rebuilds the free set for each claim: O(addresses in use) per claim, and
// safe only with a single worker. Here every pool has an allocator from
// shared/cidr that knows which addresses are taken, so a claim costs
// O(log n), and the design below keeps it safe with many workers:
//
//   - Pools belong to allocation domains. The pools whose spec.vrf names the
//     same VRF form one domain, since their address spaces may overlap and an
//     address of a VRF must never be handed out twice; any other pool is a
//     domain of its own. Every allocation and release happens under the
//     domain's mutex: concurrent reconciles serialize per domain, never
//     globally.
//   - A domain knows every address in use by any of its pools (held). An
//     address one pool hands out is marked taken in the allocators of the
//     other pools of the domain that contain it, and freed there when it is
//     released. So overlapping pools of one VRF are allowed and coordinated,
//     not rejected: each address goes to one claim, whichever pool serves it.
//   - A domain is seeded once per process, before any of its pools
//     allocates, from a live List of the API server rather than the informer
//     cache, which may lag behind writes made just before a restart or a
//     leader change: the IPAddresses of every pool naming the VRF, including
//     pools that no claim has touched yet in this process. A pool's own state
//     is seeded the same way. From then on every IPAddress of the domain is
//     created through the registry.
//   - A pool's allocator is rebuilt when its spec (generation) or its
//     resolved sources (status.resolved) change, holding every address in use
//     by the domain. An address in use that the new space no longer contains
//     is kept as outOfRange until released: a shrinking source never revokes
//     an address.
//   - The registry maps claims to addresses, so reconciling a claim again
//     returns the address it already holds, even when creating its IPAddress
//     failed the first time.
//   - An address goes back to the free set only after its IPAddress is gone
//     from the API server (see claimHandler.ReleaseAddress), so a new claim
//     never gets an address whose previous IPAddress still exists.
//   - A second replica allocates only after winning leader election, and
//     seeds from the API server at that point.
type registry struct {
	reader client.Reader

	mu      sync.Mutex
	pools   map[poolref.Key]*poolAllocations
	domains map[string]*domain
}

// domain is a set of pools that must never hand out the same address. Its
// mutex guards its own fields and every field of its pools but uid and
// domain.
type domain struct {
	key string
	// vrf is the VRF ID the pools share; empty for a single pool's domain.
	vrf string

	mu sync.Mutex
	// held maps every address in use by a pool of the domain to the pool;
	// nil until the domain is seeded.
	held  map[netip.Addr]poolref.Key
	pools map[poolref.Key]*poolAllocations
}

// poolAllocations is what the registry knows of one pool. uid and domain are
// fixed at creation (a pool that moves to another VRF gets a new one); every
// other field is guarded by domain.mu.
type poolAllocations struct {
	uid    types.UID
	domain *domain

	// generation and resolved are what the allocator was built from.
	generation int64
	resolved   []v1alpha1.ResolvedAddresses
	// alloc and space are nil while the pool does not resolve; spaceErr says why.
	alloc    *cidr.Allocator
	space    *poolspace.Space
	spaceErr error

	byClaim map[types.NamespacedName]netip.Addr
	claimOf map[netip.Addr]types.NamespacedName
	// outOfRange holds addresses in use that the current space no longer
	// contains: they stay allocated until released.
	outOfRange map[netip.Addr]struct{}
	// foreign holds addresses of the space that another pool of the domain
	// holds: taken in alloc until that pool releases them.
	foreign map[netip.Addr]struct{}
}

// poolStats are a pool's counts as the registry sees them.
type poolStats struct {
	Total, Free      *big.Int
	Used, OutOfRange int64
	// Foreign counts the addresses of the space held by other pools of its VRF.
	Foreign  int64
	SpaceErr error
}

var (
	// errPoolNotReady wraps why a pool cannot serve claims.
	errPoolNotReady = errors.New("pool is not ready")
	// errRequestedUnavailable wraps why a claim cannot have the address it requested.
	errRequestedUnavailable = errors.New("requested address unavailable")
)

func newRegistry(reader client.Reader) *registry {
	return &registry{reader: reader, pools: map[poolref.Key]*poolAllocations{}, domains: map[string]*domain{}}
}

// domainKey names the domain a pool belongs to.
func domainKey(pool v1alpha1.Pool) (key, vrf string) {
	if v := pool.PoolSpec().VRF; v != nil {
		return "vrf/" + v.ID, v.ID
	}
	return "pool/" + poolref.KeyOf(pool).String(), ""
}

// lock returns the pool's state with its domain locked, seeded and matching
// the pool's current spec and resolved sources. The caller unlocks
// pa.domain.mu.
func (r *registry) lock(ctx context.Context, pool v1alpha1.Pool) (*poolAllocations, error) {
	key := poolref.KeyOf(pool)
	dkey, vrf := domainKey(pool)
	r.mu.Lock()
	pa, ok := r.pools[key]
	var left *poolAllocations
	if !ok || pa.uid != pool.GetUID() || pa.domain.key != dkey {
		// A new pool, one deleted and created again under the same name,
		// or one that moved to another VRF.
		left = pa
		d, ok := r.domains[dkey]
		if !ok {
			d = &domain{key: dkey, vrf: vrf, pools: map[poolref.Key]*poolAllocations{}}
			r.domains[dkey] = d
		}
		pa = &poolAllocations{uid: pool.GetUID(), domain: d}
		r.pools[key] = pa
	}
	r.mu.Unlock()
	if left != nil {
		left.domain.leave(key, left)
	}

	d := pa.domain
	d.mu.Lock()
	if d.held == nil {
		if err := d.seed(ctx, r.reader); err != nil {
			d.mu.Unlock()
			return nil, fmt.Errorf("reading the IPAddresses of VRF %s: %w", d.vrf, err)
		}
	}
	if pa.byClaim == nil {
		if err := pa.seed(ctx, r.reader, pool); err != nil {
			d.mu.Unlock()
			return nil, fmt.Errorf("reading the IPAddresses of %s: %w", key, err)
		}
		d.pools[key] = pa
		for ip := range pa.claimOf {
			if _, taken := d.held[ip]; !taken {
				d.held[ip] = key
			}
		}
	}
	if pa.generation != pool.GetGeneration() || !equality.Semantic.DeepEqual(pa.resolved, pool.PoolStatus().Resolved) {
		pa.rebuild(pool)
	}
	return pa, nil
}

// seed loads the addresses in use by every pool naming the domain's VRF.
// A single pool's domain starts empty: the pool's own seed fills it.
func (d *domain) seed(ctx context.Context, reader client.Reader) error {
	held := map[netip.Addr]poolref.Key{}
	if d.vrf != "" {
		members := map[poolref.Key]bool{}
		var pools v1alpha1.MetalVRFIPPoolList
		var globals v1alpha1.GlobalMetalVRFIPPoolList
		if err := reader.List(ctx, &pools); err != nil {
			return err
		}
		if err := reader.List(ctx, &globals); err != nil {
			return err
		}
		for i := range pools.Items {
			if vrf := pools.Items[i].Spec.VRF; vrf != nil && vrf.ID == d.vrf {
				members[poolref.KeyOf(&pools.Items[i])] = true
			}
		}
		for i := range globals.Items {
			if vrf := globals.Items[i].Spec.VRF; vrf != nil && vrf.ID == d.vrf {
				members[poolref.KeyOf(&globals.Items[i])] = true
			}
		}
		var list ipamv1.IPAddressList
		if err := reader.List(ctx, &list); err != nil {
			return err
		}
		for i := range list.Items {
			address := &list.Items[i]
			key, ok := poolref.For(address.Spec.PoolRef, address.Namespace)
			if !ok || !members[key] {
				continue
			}
			if ip, err := netip.ParseAddr(address.Spec.Address); err == nil {
				held[ip] = key
			}
		}
	}
	d.held = held
	return nil
}

// seed loads the addresses in use from the API server.
func (pa *poolAllocations) seed(ctx context.Context, reader client.Reader, pool v1alpha1.Pool) error {
	var list ipamv1.IPAddressList
	if err := reader.List(ctx, &list, client.InNamespace(pool.GetNamespace())); err != nil {
		return err
	}
	pa.byClaim = map[types.NamespacedName]netip.Addr{}
	pa.claimOf = map[netip.Addr]types.NamespacedName{}
	for i := range list.Items {
		address := &list.Items[i]
		if !poolref.AddressBelongsTo(address, pool) {
			continue
		}
		ip, err := netip.ParseAddr(address.Spec.Address)
		if err != nil {
			continue // CAPI's webhook validates addresses; nothing to hold here.
		}
		claim := types.NamespacedName{Namespace: address.Namespace, Name: address.Spec.ClaimRef.Name}
		pa.byClaim[claim] = ip
		pa.claimOf[ip] = claim
	}
	pa.generation = -1 // forces rebuild against the current spec
	return nil
}

// rebuild resolves the pool's spec and sources into a fresh allocator
// holding every address in use in the domain.
func (pa *poolAllocations) rebuild(pool v1alpha1.Pool) {
	pa.generation = pool.GetGeneration()
	pa.resolved = pool.PoolStatus().DeepCopy().Resolved
	pa.outOfRange = map[netip.Addr]struct{}{}
	pa.foreign = map[netip.Addr]struct{}{}
	space, errs := poolspace.Resolve(pool.PoolSpec(), pa.resolved)
	if len(errs) > 0 {
		pa.alloc, pa.space, pa.spaceErr = nil, nil, errs.ToAggregate()
		for ip := range pa.claimOf {
			pa.outOfRange[ip] = struct{}{}
		}
		return
	}
	pa.alloc, pa.space, pa.spaceErr = cidr.NewAllocator(space.Space), space, nil
	key := poolref.KeyOf(pool)
	inUse := make([]netip.Addr, 0, len(pa.claimOf))
	for ip := range pa.claimOf {
		inUse = append(inUse, ip)
	}
	for ip, owner := range pa.domain.held {
		if owner != key && space.Contains(ip) {
			inUse = append(inUse, ip)
			pa.foreign[ip] = struct{}{}
		}
	}
	for _, ip := range pa.alloc.Seed(inUse) {
		pa.outOfRange[ip] = struct{}{}
	}
}

// take records that pool key holds ip, and marks it taken in every other
// pool of the domain that could hand it out.
func (d *domain) take(key poolref.Key, ip netip.Addr) {
	d.held[ip] = key
	for other, pa := range d.pools {
		if other != key && pa.alloc != nil && pa.alloc.Allocate(ip) == nil {
			pa.foreign[ip] = struct{}{}
		}
	}
}

// give undoes take, and returns the other pools that gained a free address.
func (d *domain) give(ip netip.Addr) []poolref.Key {
	delete(d.held, ip)
	var gained []poolref.Key
	for other, pa := range d.pools {
		if _, ok := pa.foreign[ip]; ok {
			delete(pa.foreign, ip)
			if pa.alloc.Release(ip) == nil {
				gained = append(gained, other)
			}
		}
	}
	return gained
}

// leave drops a pool's state from the domain and frees what it held there.
func (d *domain) leave(key poolref.Key, pa *poolAllocations) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pools[key] != pa {
		return
	}
	delete(d.pools, key)
	for ip := range pa.claimOf {
		if d.held[ip] == key {
			d.give(ip)
		}
	}
}

// acquire returns the address the claim holds in the pool, with the subnet
// it is handed out with. A claim that holds none gets the requested address
// when one is given (a zero Addr asks for none), else the lowest free one.
func (r *registry) acquire(ctx context.Context, pool v1alpha1.Pool, claim types.NamespacedName, requested netip.Addr) (netip.Addr, cidr.Subnet, error) {
	pa, err := r.lock(ctx, pool)
	if err != nil {
		return netip.Addr{}, cidr.Subnet{}, err
	}
	defer pa.domain.mu.Unlock()

	if pa.alloc == nil {
		return netip.Addr{}, cidr.Subnet{}, fmt.Errorf("%w: %w", errPoolNotReady, pa.spaceErr)
	}
	ip, held := pa.byClaim[claim]
	if !held {
		if ip, err = pa.allocate(requested); err != nil {
			return netip.Addr{}, cidr.Subnet{}, err
		}
		pa.byClaim[claim] = ip
		pa.claimOf[ip] = claim
		pa.domain.take(poolref.KeyOf(pool), ip)
	}
	subnet, _ := pa.space.SubnetOf(ip)
	return ip, subnet, nil
}

// allocate takes the requested address, or the lowest free one when none is
// requested.
func (pa *poolAllocations) allocate(requested netip.Addr) (netip.Addr, error) {
	if !requested.IsValid() {
		return pa.alloc.Next()
	}
	if _, foreign := pa.foreign[requested]; foreign {
		return netip.Addr{}, fmt.Errorf("%w: requested address %s is held by %s, another pool of VRF %s",
			errRequestedUnavailable, requested, pa.domain.held[requested], pa.domain.vrf)
	}
	err := pa.alloc.Allocate(requested)
	switch {
	case errors.Is(err, cidr.ErrInUse):
		return netip.Addr{}, fmt.Errorf("%w: requested address %s is held by claim %s", errRequestedUnavailable, requested, pa.claimOf[requested])
	case errors.Is(err, cidr.ErrNotAllocatable):
		return netip.Addr{}, fmt.Errorf("%w: requested address %s is not one the pool hands out: it lies outside its addresses, or is a gateway, network, broadcast, anycast or excluded address",
			errRequestedUnavailable, requested)
	}
	return requested, err
}

// adopt records an address that already has an IPAddress, and fails if the
// registry knows it as another claim's, in this pool or another pool of its
// VRF: the sign of a duplicate that must be surfaced, not papered over.
func (r *registry) adopt(ctx context.Context, pool v1alpha1.Pool, claim types.NamespacedName, ip netip.Addr) error {
	pa, err := r.lock(ctx, pool)
	if err != nil {
		return err
	}
	defer pa.domain.mu.Unlock()

	key := poolref.KeyOf(pool)
	if owner, taken := pa.claimOf[ip]; taken {
		if owner != claim {
			return fmt.Errorf("address %s of claim %s is also held by claim %s", ip, claim, owner)
		}
		return nil
	}
	if owner, taken := pa.domain.held[ip]; taken && owner != key {
		return fmt.Errorf("address %s of claim %s is also held by %s, another pool of VRF %s", ip, claim, owner, pa.domain.vrf)
	}
	if prev, held := pa.byClaim[claim]; held {
		return fmt.Errorf("claim %s holds %s in the registry but its IPAddress says %s", claim, prev, ip)
	}
	pa.byClaim[claim] = ip
	pa.claimOf[ip] = claim
	if pa.alloc == nil || pa.alloc.Allocate(ip) != nil {
		pa.outOfRange[ip] = struct{}{}
	}
	pa.domain.take(key, ip)
	return nil
}

// release frees the address the claim holds, if any. It returns the pools
// that gained a free address: the claim's own (unless the address was out of
// range), and the other pools of its VRF that contain the address. The
// caller must have made sure the claim's IPAddress is gone.
func (r *registry) release(key poolref.Key, claim types.NamespacedName) []poolref.Key {
	r.mu.Lock()
	pa, ok := r.pools[key]
	r.mu.Unlock()
	if !ok {
		return nil
	}

	pa.domain.mu.Lock()
	defer pa.domain.mu.Unlock()
	ip, held := pa.byClaim[claim]
	if !held {
		return nil
	}
	delete(pa.byClaim, claim)
	delete(pa.claimOf, ip)
	gained := pa.domain.give(ip)
	if _, out := pa.outOfRange[ip]; out {
		delete(pa.outOfRange, ip)
		return gained
	}
	if pa.alloc.Release(ip) == nil {
		gained = append(gained, key)
	}
	return gained
}

// stats returns the pool's counts.
func (r *registry) stats(ctx context.Context, pool v1alpha1.Pool) (poolStats, error) {
	pa, err := r.lock(ctx, pool)
	if err != nil {
		return poolStats{}, err
	}
	defer pa.domain.mu.Unlock()

	s := poolStats{
		Total:      new(big.Int),
		Free:       new(big.Int),
		Used:       int64(len(pa.byClaim)),
		OutOfRange: int64(len(pa.outOfRange)),
		Foreign:    int64(len(pa.foreign)),
		SpaceErr:   pa.spaceErr,
	}
	if pa.alloc != nil {
		s.Total = pa.alloc.Space().Total()
		s.Free = pa.alloc.Free()
	}
	return s, nil
}

// forget drops a deleted pool's state.
func (r *registry) forget(pool v1alpha1.Pool) {
	key := poolref.KeyOf(pool)
	r.mu.Lock()
	pa, ok := r.pools[key]
	if ok && pa.uid == pool.GetUID() {
		delete(r.pools, key)
		if pa.domain.vrf == "" {
			delete(r.domains, pa.domain.key)
		}
	}
	r.mu.Unlock()
	if ok && pa.uid == pool.GetUID() {
		pa.domain.leave(key, pa)
	}
}
