package controllers

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"sync"

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
//   - Every allocation and release of a pool happens under that pool's mutex.
//     Concurrent reconciles serialize per pool, never globally.
//   - A pool's state is seeded once per process, under its mutex, from a live
//     List of the API server rather than the informer cache, which may lag
//     behind writes made just before a restart or a leader change. From then
//     on every IPAddress of the pool is created through the registry.
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

	mu    sync.Mutex
	pools map[poolref.Key]*poolAllocations
}

// poolAllocations is what the registry knows of one pool. uid is fixed at
// creation; every other field is guarded by mu.
type poolAllocations struct {
	uid types.UID

	mu         sync.Mutex
	generation int64
	// alloc is nil while the pool's spec does not resolve; spaceErr says why.
	alloc    *cidr.Allocator
	spaceErr error

	byClaim map[types.NamespacedName]netip.Addr
	claimOf map[netip.Addr]types.NamespacedName
	// outOfRange holds addresses in use that the current space no longer
	// contains: they stay allocated until released.
	outOfRange map[netip.Addr]struct{}
}

// poolStats are a pool's counts as the registry sees them.
type poolStats struct {
	Total, Free      *big.Int
	Used, OutOfRange int64
	SpaceErr         error
}

var (
	// errPoolNotReady wraps why a pool cannot serve claims.
	errPoolNotReady = errors.New("pool is not ready")
	// errRequestedUnavailable wraps why a claim cannot have the address it requested.
	errRequestedUnavailable = errors.New("requested address unavailable")
)

func newRegistry(reader client.Reader) *registry {
	return &registry{reader: reader, pools: map[poolref.Key]*poolAllocations{}}
}

// lock returns the pool's state, locked, seeded and matching the pool's
// current spec. The caller unlocks it.
func (r *registry) lock(ctx context.Context, pool v1alpha1.Pool) (*poolAllocations, error) {
	key := poolref.KeyOf(pool)
	r.mu.Lock()
	pa, ok := r.pools[key]
	if !ok || pa.uid != pool.GetUID() {
		// A new pool, or one deleted and created again under the same name.
		pa = &poolAllocations{uid: pool.GetUID()}
		r.pools[key] = pa
	}
	r.mu.Unlock()

	pa.mu.Lock()
	if pa.byClaim == nil {
		if err := pa.seed(ctx, r.reader, pool); err != nil {
			pa.mu.Unlock()
			return nil, fmt.Errorf("reading the IPAddresses of %s: %w", key, err)
		}
	}
	if pa.generation != pool.GetGeneration() {
		pa.rebuild(pool)
	}
	return pa, nil
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

// rebuild resolves the pool's spec into a fresh allocator holding every
// address in use.
func (pa *poolAllocations) rebuild(pool v1alpha1.Pool) {
	pa.generation = pool.GetGeneration()
	pa.outOfRange = map[netip.Addr]struct{}{}
	space, errs := poolspace.Resolve(pool.PoolSpec())
	if len(errs) > 0 {
		pa.alloc, pa.spaceErr = nil, errs.ToAggregate()
		for ip := range pa.claimOf {
			pa.outOfRange[ip] = struct{}{}
		}
		return
	}
	pa.alloc, pa.spaceErr = cidr.NewAllocator(space), nil
	inUse := make([]netip.Addr, 0, len(pa.claimOf))
	for ip := range pa.claimOf {
		inUse = append(inUse, ip)
	}
	for _, ip := range pa.alloc.Seed(inUse) {
		pa.outOfRange[ip] = struct{}{}
	}
}

// acquire returns the address the claim holds in the pool. A claim that
// holds none gets the requested address when one is given (a zero Addr asks
// for none), else the lowest free one.
func (r *registry) acquire(ctx context.Context, pool v1alpha1.Pool, claim types.NamespacedName, requested netip.Addr) (netip.Addr, cidr.Subnet, error) {
	pa, err := r.lock(ctx, pool)
	if err != nil {
		return netip.Addr{}, cidr.Subnet{}, err
	}
	defer pa.mu.Unlock()

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
	}
	subnet, _ := pa.alloc.Space().SubnetOf(ip)
	return ip, subnet, nil
}

// allocate takes the requested address, or the lowest free one when none is
// requested.
func (pa *poolAllocations) allocate(requested netip.Addr) (netip.Addr, error) {
	if !requested.IsValid() {
		return pa.alloc.Next()
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
// registry knows it as another claim's: the sign of a duplicate that must be
// surfaced, not papered over.
func (r *registry) adopt(ctx context.Context, pool v1alpha1.Pool, claim types.NamespacedName, ip netip.Addr) error {
	pa, err := r.lock(ctx, pool)
	if err != nil {
		return err
	}
	defer pa.mu.Unlock()

	if owner, taken := pa.claimOf[ip]; taken {
		if owner != claim {
			return fmt.Errorf("address %s of claim %s is also held by claim %s", ip, claim, owner)
		}
		return nil
	}
	if prev, held := pa.byClaim[claim]; held {
		return fmt.Errorf("claim %s holds %s in the registry but its IPAddress says %s", claim, prev, ip)
	}
	pa.byClaim[claim] = ip
	pa.claimOf[ip] = claim
	if pa.alloc == nil || pa.alloc.Allocate(ip) != nil {
		pa.outOfRange[ip] = struct{}{}
	}
	return nil
}

// release frees the address the claim holds, if any, and reports whether one
// was freed. The caller must have made sure the claim's IPAddress is gone.
func (r *registry) release(key poolref.Key, claim types.NamespacedName) bool {
	r.mu.Lock()
	pa, ok := r.pools[key]
	r.mu.Unlock()
	if !ok {
		return false
	}

	pa.mu.Lock()
	defer pa.mu.Unlock()
	ip, held := pa.byClaim[claim]
	if !held {
		return false
	}
	delete(pa.byClaim, claim)
	delete(pa.claimOf, ip)
	if _, out := pa.outOfRange[ip]; out {
		delete(pa.outOfRange, ip)
		return false
	}
	return pa.alloc.Release(ip) == nil
}

// stats returns the pool's counts.
func (r *registry) stats(ctx context.Context, pool v1alpha1.Pool) (poolStats, error) {
	pa, err := r.lock(ctx, pool)
	if err != nil {
		return poolStats{}, err
	}
	defer pa.mu.Unlock()

	s := poolStats{
		Total:      new(big.Int),
		Free:       new(big.Int),
		Used:       int64(len(pa.byClaim)),
		OutOfRange: int64(len(pa.outOfRange)),
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
	r.mu.Lock()
	defer r.mu.Unlock()
	if pa, ok := r.pools[poolref.KeyOf(pool)]; ok && pa.uid == pool.GetUID() {
		delete(r.pools, poolref.KeyOf(pool))
	}
}
