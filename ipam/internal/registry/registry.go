// Package registry is the one place where the IPAM provider hands out
// addresses and takes them back.
//
// The reference in-cluster provider lists every IPAddress of a pool and
// rebuilds the free set for each claim: O(addresses in use) per claim, and
// safe only with a single worker. Here every pool has an allocator from
// shared/cidr, so a claim costs O(log n), and the design below keeps it safe
// with many workers and with more than one process:
//
//   - Pools belong to allocation domains (see domainOf). The pools whose VRF
//     resolved, each through its own credentials, to the same project and
//     VRF form one domain; any other pool is a domain of its own. Every
//     allocation and release happens under the domain's mutex: concurrent
//     reconciles serialize per domain, never globally.
//   - A domain knows every address in use by any of its pools (held). An
//     address held in the domain is taken in the allocator of every pool of
//     the domain that contains it, and freed there when it is released.
//   - Memory is not the authority: the Store is. An address is handed out
//     only after its record was created in the API server, whose name is
//     derived from the domain and the address, so a second writer (a
//     replica without leader election, a frozen leader that woke up) gets
//     a TakenError and moves on to another address.
//   - A domain is seeded once per process, before any of its pools
//     allocates, from the Store read live: its records, and the IPAddresses
//     of its pools that have none yet (made before records existed), whose
//     records it creates. A pool is seeded the same way when it joins.
//   - A pool's allocator is rebuilt from the newest read of the pool only:
//     a reconcile holding an older read never rolls the allocator back to a
//     spec without the gateway or exclusion added since.
//   - An address in use that the pool's space no longer contains is
//     counted out of range until released: a shrinking source never revokes
//     an address.
//   - IPAddresses made by others (clusterctl move, a restore) are recorded
//     before they are created (Admit, from the IPAddress webhook), so no
//     claim is served an address they hold, whatever the order.
//   - A GlobalMetalVRFIPPool hands out addresses in the one management
//     cluster its annotation names (see allocatesHere); its copies elsewhere
//     only keep what their claims hold.
package registry

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

// Registry hands out addresses of pools to claims.
type Registry struct {
	store Store
	// fence says whether this process may allocate now; nil when it always may.
	fence func() error
	// cluster identifies the management cluster this process runs in.
	cluster string

	mu      sync.Mutex
	pools   map[poolref.Key]*poolState
	domains map[string]*domain
}

// New returns a registry over store, in the management cluster named
// cluster. fence, when not nil, is asked before every allocation; an error
// from it refuses the allocation.
func New(store Store, fence func() error, cluster string) *Registry {
	return &Registry{store: store, fence: fence, cluster: cluster, pools: map[poolref.Key]*poolState{}, domains: map[string]*domain{}}
}

// Stats are a pool's counts as the registry sees them.
type Stats struct {
	Total, Free      *big.Int
	Used, OutOfRange int64
	// Foreign counts the addresses of the space held by other pools of its domain.
	Foreign int64
	// Retired counts the pool's addresses kept out of use by Retire.
	Retired  int64
	SpaceErr error
	// Elsewhere says why the pool hands out nothing in this management
	// cluster (see allocatesHere), or is nil.
	Elsewhere error
}

// Acquire returns the address the claim holds in the pool, with the subnet
// it is handed out with. A claim that holds none gets the requested address
// when one is given (a zero Addr asks for none), else the lowest free one.
func (r *Registry) Acquire(ctx context.Context, pool v1alpha1.Pool, claim Claim, requested netip.Addr) (netip.Addr, cidr.Subnet, error) {
	if r.fence != nil {
		if err := r.fence(); err != nil {
			return netip.Addr{}, cidr.Subnet{}, err
		}
	}
	for {
		ps, err := r.lock(ctx, pool)
		if err != nil {
			return netip.Addr{}, cidr.Subnet{}, err
		}
		d := ps.domain
		ip, held := ps.byClaim[claim]
		if held {
			subnet, err := ps.subnetOf(ip)
			d.mu.Unlock()
			return ip, subnet, err
		}
		if err := ps.ready(); err != nil {
			d.mu.Unlock()
			return netip.Addr{}, cidr.Subnet{}, err
		}
		if elsewhere := ps.elsewhere; elsewhere != nil {
			d.mu.Unlock()
			return netip.Addr{}, cidr.Subnet{}, fmt.Errorf("%w: %w", ErrPoolNotReady, elsewhere)
		}
		if ip, err = ps.pick(requested, claim); err != nil {
			d.mu.Unlock()
			return netip.Addr{}, cidr.Subnet{}, err
		}
		holder := Holder{Pool: ps.key, Claim: claim}
		d.take(ip, holder)
		d.mu.Unlock()

		err = r.store.Reserve(ctx, d.key, Record{Address: ip, Holder: holder})

		d.mu.Lock()
		var taken *TakenError
		switch {
		case err == nil:
		case errors.As(err, &taken) && taken.Holder.Claim.UID == claim.UID:
			// Another process already gave this address to this very claim.
		case errors.As(err, &taken):
			// Held elsewhere, unknown to this process: it stays taken here.
			d.held[ip] = taken.Holder
			d.mu.Unlock()
			if requested.IsValid() {
				return netip.Addr{}, cidr.Subnet{}, ps.unavailable(requested, taken.Holder, claim)
			}
			continue
		default:
			if d.held[ip] == holder {
				d.give(ip)
			}
			d.mu.Unlock()
			return netip.Addr{}, cidr.Subnet{}, fmt.Errorf("recording address %s: %w", ip, err)
		}
		if ps.left {
			// The pool moved to another domain meanwhile: this record
			// belongs to the old one.
			d.mu.Unlock()
			if err := r.store.Unreserve(ctx, d.key, Record{Address: ip, Holder: holder}); err != nil {
				return netip.Addr{}, cidr.Subnet{}, err
			}
			continue
		}
		ps.byClaim[claim] = ip
		subnet, err := ps.subnetOf(ip)
		d.mu.Unlock()
		return ip, subnet, err
	}
}

// Adopt records an address that already has an IPAddress of the claim, and
// fails with ErrConflict if the address is another claim's: the sign of a
// duplicate that must be surfaced, not papered over. An address the claim
// held in the registry and its IPAddress does not name (a race it lost) is
// given back.
func (r *Registry) Adopt(ctx context.Context, pool v1alpha1.Pool, claim Claim, ip netip.Addr) error {
	ps, err := r.lock(ctx, pool)
	if err != nil {
		return err
	}
	return r.adopt(ctx, ps, claim, ip)
}

// adopt is Adopt on the pool's state, its domain locked; it unlocks it.
func (r *Registry) adopt(ctx context.Context, ps *poolState, claim Claim, ip netip.Addr) error {
	d := ps.domain
	holder := Holder{Pool: ps.key, Claim: claim}
	if h, ok := d.held[ip]; (!ok || h.Claim.UID != claim.UID) && d.allocates {
		// Memory may be stale (another process recorded or released the
		// address): the record decides.
		d.mu.Unlock()
		err := r.store.Reserve(ctx, d.key, Record{Address: ip, Holder: holder})
		d.mu.Lock()
		var taken *TakenError
		switch {
		case err == nil, errors.As(err, &taken) && taken.Holder.Claim.UID == claim.UID:
			d.take(ip, holder)
		case errors.As(err, &taken):
			d.take(ip, taken.Holder)
			d.mu.Unlock()
			return ps.conflict(ip, taken.Holder, claim)
		default:
			d.mu.Unlock()
			return fmt.Errorf("recording address %s: %w", ip, err)
		}
	} else if !ok {
		d.take(ip, holder)
	}
	prev, had := ps.byClaim[claim]
	ps.byClaim[claim] = ip
	if !had || prev == ip {
		d.mu.Unlock()
		return nil
	}
	d.give(prev)
	d.mu.Unlock()
	return r.store.Unreserve(ctx, d.key, Record{Address: prev, Holder: holder})
}

// Admit records the address of an IPAddress of the claim that is about to
// be created, and fails with ErrConflict if another claim holds it. It is
// how IPAddresses this process did not hand out (clusterctl move, a
// restore) are known before any claim could be served their address: the
// record is created before the IPAddress exists. A VRF pool whose VRF was
// not read yet refuses it with ErrPoolNotReady. A replica that may not
// allocate now leaves its memory alone, which only the allocating one keeps
// current, and asks the store alone.
func (r *Registry) Admit(ctx context.Context, pool v1alpha1.Pool, claim Claim, ip netip.Addr) error {
	// A domain that does not allocate keeps no records: the record's name is
	// not known yet.
	notReady := fmt.Errorf("%w: spec.vrf has not been read with the pool's credentials yet (see the SourcesResolved condition)", ErrPoolNotReady)
	if r.fence == nil || r.fence() == nil {
		ps, err := r.lock(ctx, pool)
		if err != nil {
			return err
		}
		if !ps.domain.allocates {
			ps.domain.mu.Unlock()
			return notReady
		}
		return r.admit(ctx, ps, claim, ip)
	}
	key, allocates := domainOf(pool)
	if !allocates {
		return notReady
	}
	err := r.store.Reserve(ctx, key, Record{Address: ip, Holder: Holder{Pool: poolref.KeyOf(pool), Claim: claim}})
	var taken *TakenError
	switch {
	case errors.As(err, &taken) && taken.Holder.Claim.UID == claim.UID:
		return nil
	case errors.As(err, &taken):
		return fmt.Errorf("%w: address %s of claim %s is also held by %s", ErrConflict, ip, claim.Name, describe(poolref.KeyOf(pool), taken.Holder, claim))
	}
	return err
}

// admit is Admit on the pool's state, its domain locked; it unlocks it.
// Unlike adopt it gives back no other address of the claim: the IPAddress
// is not created yet, and its creation may still fail (another replica
// created the claim's IPAddress first, with the address it holds). An
// address recorded for a creation that failed stays the claim's until the
// claim is released.
func (r *Registry) admit(ctx context.Context, ps *poolState, claim Claim, ip netip.Addr) error {
	d := ps.domain
	holder := Holder{Pool: ps.key, Claim: claim}
	if h, ok := d.held[ip]; ok && h.Claim.UID == claim.UID && !h.Retired {
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	err := r.store.Reserve(ctx, d.key, Record{Address: ip, Holder: holder})
	d.mu.Lock()
	defer d.mu.Unlock()
	var taken *TakenError
	switch {
	case err == nil, errors.As(err, &taken) && taken.Holder.Claim.UID == claim.UID:
		d.take(ip, holder)
		if _, had := ps.byClaim[claim]; !had {
			ps.byClaim[claim] = ip
		}
		return nil
	case errors.As(err, &taken):
		d.take(ip, taken.Holder)
		return ps.conflict(ip, taken.Holder, claim)
	}
	return fmt.Errorf("recording address %s: %w", ip, err)
}

// Retire keeps ip out of use for good when the claim's IPAddress holding it
// lost its claim without a release: clusterctl move deletes the claims of a
// global pool's IPAddresses and leaves the IPAddresses, whose addresses live
// on in the target cluster. The record stays, marked retired, until the
// pool is deleted; the caller then deletes the IPAddress. An address with no
// record yet gets a retired one. A pool whose spec.vrf has not resolved has
// no records: it fails with ErrPoolNotReady, and the IPAddress must wait.
func (r *Registry) Retire(ctx context.Context, pool v1alpha1.Pool, claim Claim, ip netip.Addr) error {
	ps, err := r.lock(ctx, pool)
	if err != nil {
		return err
	}
	d := ps.domain
	defer d.mu.Unlock()
	if !d.allocates {
		// Without records a retired address would be free again after a
		// restart.
		return ps.ready()
	}
	holder := Holder{Pool: ps.key, Claim: claim}
	h, held := d.held[ip]
	switch {
	case held && h.Retired:
		return nil
	case held && h.Claim.UID != claim.UID:
		return nil // not this claim's: nothing of it to keep
	case !held:
		var taken *TakenError
		if err := r.store.Reserve(ctx, d.key, Record{Address: ip, Holder: holder}); errors.As(err, &taken) {
			d.take(ip, taken.Holder)
			return nil
		} else if err != nil {
			return fmt.Errorf("recording address %s: %w", ip, err)
		}
	}
	if err := r.store.Retire(ctx, d.key, Record{Address: ip, Holder: holder}); err != nil {
		return fmt.Errorf("retiring the record of address %s: %w", ip, err)
	}
	holder.Retired = true
	d.take(ip, holder)
	if ps.byClaim[claim] == ip {
		delete(ps.byClaim, claim)
	}
	return nil
}

// HandOver stops the pool from handing out addresses in this management
// cluster, if none of its claims here holds one; it returns how many
// claims of each namespace hold one otherwise, and then changes nothing.
func (r *Registry) HandOver(ctx context.Context, pool v1alpha1.Pool) (map[string]int, error) {
	ps, err := r.lock(ctx, pool)
	if err != nil {
		return nil, err
	}
	defer ps.domain.mu.Unlock()
	holders := map[string]int{}
	for c := range ps.byClaim {
		holders[c.Namespace]++
	}
	if len(holders) == 0 {
		ps.handedOver = true
		ps.elsewhere = allocatesHere(ps.built, r.cluster, true)
	}
	return holders, nil
}

// Release frees every address the claim holds. It returns the pools that
// gained a free address. The caller must have made sure the claim's
// IPAddress is gone.
func (r *Registry) Release(ctx context.Context, key poolref.Key, claim Claim) ([]poolref.Key, error) {
	if err := r.store.Free(ctx, claim); err != nil {
		return nil, fmt.Errorf("deleting the records of claim %s: %w", claim.NamespacedName, err)
	}
	r.mu.Lock()
	ps, ok := r.pools[key]
	r.mu.Unlock()
	if !ok {
		return nil, nil
	}
	d := ps.domain
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(ps.byClaim, claim)
	var gained []poolref.Key
	for ip, h := range d.held {
		if h.Claim.UID == claim.UID && !h.Retired {
			gained = append(gained, d.give(ip)...)
		}
	}
	return gained, nil
}

// Stats returns the pool's counts.
func (r *Registry) Stats(ctx context.Context, pool v1alpha1.Pool) (Stats, error) {
	ps, err := r.lock(ctx, pool)
	if err != nil {
		return Stats{}, err
	}
	defer ps.domain.mu.Unlock()

	s := Stats{Total: new(big.Int), Free: new(big.Int), Used: int64(len(ps.byClaim)), SpaceErr: ps.ready(), Elsewhere: ps.elsewhere}
	for _, h := range ps.domain.held {
		if h.Pool == ps.key && h.Retired {
			s.Retired++
		}
	}
	for _, ip := range ps.byClaim {
		if ps.space == nil || !ps.space.Contains(ip) {
			s.OutOfRange++
		}
	}
	if ps.alloc == nil {
		return s, nil
	}
	for ip, h := range ps.domain.held {
		if h.Pool != ps.key && ps.space.Contains(ip) {
			s.Foreign++
		}
	}
	s.Total = ps.alloc.Space().Total()
	s.Free = ps.alloc.Free()
	return s, nil
}

// Forget drops a deleted pool's state, and the records it retired: nothing
// can reuse their addresses once the pool is gone.
func (r *Registry) Forget(ctx context.Context, pool v1alpha1.Pool) error {
	key := poolref.KeyOf(pool)
	if domain, allocates := domainOf(pool); allocates {
		if err := r.store.ForgetRetired(ctx, domain, key); err != nil {
			return fmt.Errorf("deleting the retired records of %s: %w", key, err)
		}
	}
	r.mu.Lock()
	ps, ok := r.pools[key]
	if ok && ps.uid == pool.GetUID() {
		delete(r.pools, key)
		r.dropMember(ps)
	}
	r.mu.Unlock()
	if ok && ps.uid == pool.GetUID() {
		ps.domain.leave(ps)
	}
	return nil
}

// domain is a set of pools that must never hand out the same address. Its
// mutex guards its own fields and those of its pools noted so.
type domain struct {
	key string
	// allocates is false for the domain of a pool whose spec.vrf has not
	// resolved: it knows what the pool holds, and hands out nothing.
	allocates bool
	// members are the pools the registry put in the domain; guarded by
	// Registry.mu.
	members map[poolref.Key]bool

	mu sync.Mutex
	// held maps every address in use in the domain to its holder; nil until
	// the domain is seeded.
	held  map[netip.Addr]Holder
	pools map[poolref.Key]*poolState
}

// poolState is what the registry knows of one pool. key, uid and domain are
// fixed at creation (a pool that moves to another domain gets a new one).
type poolState struct {
	key    poolref.Key
	uid    types.UID
	domain *domain
	// latest is the newest read of the pool seen; guarded by Registry.mu.
	latest v1alpha1.Pool

	// The fields below are guarded by domain.mu.

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
	// alloc and space are nil while the pool does not resolve; spaceErr says why.
	alloc    *cidr.Allocator
	space    *poolspace.Space
	spaceErr error
	// byClaim maps the pool's claims to their addresses; nil until seeded.
	byClaim map[Claim]netip.Addr
}

// DomainOf names the allocation domain of a pool.
func DomainOf(pool v1alpha1.Pool) string {
	key, _ := domainOf(pool)
	return key
}

// domainOf names the domain a pool belongs to, and says whether it may
// allocate. A VRF pool joins the domain of the VRF only once the VRF was
// read through the pool's own credentials (status.vrf), so a pool naming a
// VRF ID its credentials cannot read never joins the pools that can.
func domainOf(pool v1alpha1.Pool) (key string, allocates bool) {
	spec := pool.PoolSpec()
	if spec.VRF == nil {
		return "pool/" + poolref.KeyOf(pool).String(), true
	}
	if vrf := pool.PoolStatus().VRF; vrf != nil && vrf.ID == spec.VRF.ID {
		return "vrf/" + vrf.ProjectID + "/" + vrf.ID, true
	}
	return "unresolved/" + poolref.KeyOf(pool).String(), false
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
	_, tokened := annotations[v1alpha1.HandoverTokenAnnotation]
	switch {
	case handedOver || (tokened && allocating == cluster):
		return fmt.Errorf("%s %q was handed over to another management cluster and hands out nothing here", v1alpha1.GlobalMetalVRFIPPoolKind, pool.GetName())
	case allocating == "":
		return fmt.Errorf("%s %q has no annotation %s yet", v1alpha1.GlobalMetalVRFIPPoolKind, pool.GetName(), v1alpha1.AllocatingClusterAnnotation)
	case allocating != cluster:
		return fmt.Errorf("%s %q allocates in management cluster %s (annotation %s): this copy keeps the addresses of its claims and hands out none until it is taken over (docs/install.md, \"Moving a cluster\")",
			v1alpha1.GlobalMetalVRFIPPoolKind, pool.GetName(), allocating, v1alpha1.AllocatingClusterAnnotation)
	}
	return nil
}

// newer reports whether read a of a pool is newer than read b. Resource
// versions are ordered (Kubernetes 1.35 made that a guarantee); when they are
// not comparable only the generation counts.
func newer(a, b v1alpha1.Pool) bool {
	if a.GetGeneration() != b.GetGeneration() {
		return a.GetGeneration() > b.GetGeneration()
	}
	c, err := resourceversion.CompareResourceVersion(a.GetResourceVersion(), b.GetResourceVersion())
	return err == nil && c > 0
}

// lock returns the pool's state with its domain locked, seeded and built
// from the newest read of the pool seen. The caller unlocks domain.mu.
func (r *Registry) lock(ctx context.Context, pool v1alpha1.Pool) (*poolState, error) {
	for {
		ps, err := r.lockOnce(ctx, pool)
		if err != nil || ps != nil {
			return ps, err
		}
	}
}

// lockOnce is one attempt of lock; it returns nil, nil when the pool left
// its domain meanwhile.
func (r *Registry) lockOnce(ctx context.Context, pool v1alpha1.Pool) (*poolState, error) {
	ps, left := r.find(pool)
	if left != nil {
		left.domain.leave(left)
	}
	d := ps.domain
	d.mu.Lock()
	if ps.left {
		d.mu.Unlock()
		return nil, nil
	}
	if err := r.seed(ctx, ps); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	r.mu.Lock()
	latest := ps.latest
	r.mu.Unlock()
	if ps.built == nil || ps.built.GetGeneration() != latest.GetGeneration() ||
		!equality.Semantic.DeepEqual(ps.built.PoolStatus().Resolved, latest.PoolStatus().Resolved) {
		ps.rebuild(latest)
	}
	ps.elsewhere = allocatesHere(latest, r.cluster, ps.handedOver)
	return ps, nil
}

// find returns the pool's state, creating it in the right domain for a new
// pool, one deleted and created again under the same name, or one whose
// newest read puts it in another domain; left is the state it replaced.
func (r *Registry) find(pool v1alpha1.Pool) (ps, left *poolState) {
	key := poolref.KeyOf(pool)
	r.mu.Lock()
	defer r.mu.Unlock()
	ps = r.pools[key]
	if ps != nil && ps.uid == pool.GetUID() && !newer(pool, ps.latest) {
		return ps, nil
	}
	latest := pool.DeepCopyObject().(v1alpha1.Pool)
	dkey, allocates := domainOf(latest)
	if ps != nil && ps.uid == pool.GetUID() && ps.domain.key == dkey {
		ps.latest = latest
		return ps, nil
	}
	if ps != nil {
		left = ps
		r.dropMember(ps)
	}
	d, ok := r.domains[dkey]
	if !ok {
		d = &domain{key: dkey, allocates: allocates, members: map[poolref.Key]bool{}, pools: map[poolref.Key]*poolState{}}
		r.domains[dkey] = d
	}
	d.members[key] = true
	ps = &poolState{key: key, uid: pool.GetUID(), domain: d, latest: latest}
	r.pools[key] = ps
	return ps, left
}

// dropMember takes a pool out of its domain's members, and drops a domain
// left without members: a pool that joins it again later finds it seeded
// afresh, not with what it held when it left. The caller holds r.mu.
func (r *Registry) dropMember(ps *poolState) {
	delete(ps.domain.members, ps.key)
	if len(ps.domain.members) == 0 && r.domains[ps.domain.key] == ps.domain {
		delete(r.domains, ps.domain.key)
	}
}

// seed loads the domain, then the pool, from the store, once.
func (r *Registry) seed(ctx context.Context, ps *poolState) error {
	d := ps.domain
	if d.held == nil {
		if err := d.seed(ctx, r.store); err != nil {
			return fmt.Errorf("reading the addresses in use in domain %s: %w", d.key, err)
		}
	}
	if ps.byClaim == nil {
		if err := d.seedPool(ctx, r.store, ps); err != nil {
			return fmt.Errorf("reading the addresses in use of %s: %w", ps.key, err)
		}
	}
	return nil
}

// seed loads the addresses in use in the domain: its records, and the
// IPAddresses of its pools that have none yet, for which it creates them.
func (d *domain) seed(ctx context.Context, store Store) error {
	held := map[netip.Addr]Holder{}
	if d.allocates {
		records, err := store.Records(ctx, d.key)
		if err != nil {
			return err
		}
		for _, rec := range records {
			held[rec.Address] = rec.Holder
		}
		addresses, err := store.Addresses(ctx, d.key)
		if err != nil {
			return err
		}
		if err := adopt(ctx, store, d.key, held, addresses); err != nil {
			return err
		}
	}
	d.held = held
	return nil
}

// seedPool adds a pool joining the domain: its IPAddresses without a record
// get one, and the records of the domain that name it are its claims'.
func (d *domain) seedPool(ctx context.Context, store Store, ps *poolState) error {
	addresses, err := store.PoolAddresses(ctx, ps.key)
	if err != nil {
		return err
	}
	if d.allocates {
		if err := adopt(ctx, store, d.key, d.held, addresses); err != nil {
			return err
		}
	} else {
		for _, rec := range addresses {
			if _, ok := d.held[rec.Address]; !ok {
				d.held[rec.Address] = rec.Holder
			}
		}
	}
	ps.byClaim = map[Claim]netip.Addr{}
	for ip, h := range d.held {
		if h.Pool == ps.key && !h.Retired {
			ps.byClaim[h.Claim] = ip
		}
	}
	d.pools[ps.key] = ps
	return nil
}

// adoptWorkers bounds the records created at once when seeding.
const adoptWorkers = 16

// adopt creates the records of addresses missing from held, and adds them
// to it; an address another claim recorded first stays that claim's.
func adopt(ctx context.Context, store Store, domain string, held map[netip.Addr]Holder, addresses []Record) error {
	var missing []Record
	for _, rec := range addresses {
		if _, ok := held[rec.Address]; !ok {
			missing = append(missing, rec)
			held[rec.Address] = rec.Holder // one record per address even if two IPAddresses share it
		}
	}
	errs := make([]error, len(missing))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(adoptWorkers, len(missing)) {
		wg.Go(func() {
			for i := range work {
				errs[i] = store.Reserve(ctx, domain, missing[i])
			}
		})
	}
	for i := range missing {
		work <- i
	}
	close(work)
	wg.Wait()
	for i, err := range errs {
		var taken *TakenError
		switch {
		case err == nil:
		case errors.As(err, &taken):
			held[missing[i].Address] = taken.Holder
		default:
			return err
		}
	}
	return nil
}

// rebuild resolves the pool's spec and sources into a fresh allocator
// holding every address in use in the domain.
func (ps *poolState) rebuild(pool v1alpha1.Pool) {
	ps.built = pool
	space, errs := poolspace.Resolve(pool.PoolSpec(), pool.PoolStatus().Resolved)
	if len(errs) > 0 {
		ps.alloc, ps.space, ps.spaceErr = nil, nil, errs.ToAggregate()
		return
	}
	ps.alloc, ps.space, ps.spaceErr = cidr.NewAllocator(space.Space), space, nil
	inUse := make([]netip.Addr, 0, len(ps.domain.held))
	for ip := range ps.domain.held {
		inUse = append(inUse, ip)
	}
	ps.alloc.Seed(inUse)
}

// ready says why the pool cannot hand out addresses, or nil.
func (ps *poolState) ready() error {
	switch {
	case !ps.domain.allocates:
		return fmt.Errorf("%w: spec.vrf has not been read with the pool's credentials yet (see the SourcesResolved condition)", ErrPoolNotReady)
	case ps.alloc == nil:
		return fmt.Errorf("%w: %w", ErrPoolNotReady, ps.spaceErr)
	}
	return nil
}

// subnetOf returns the subnet ip is handed out with.
func (ps *poolState) subnetOf(ip netip.Addr) (cidr.Subnet, error) {
	if ps.space == nil {
		return cidr.Subnet{}, ps.ready()
	}
	subnet, _ := ps.space.SubnetOf(ip)
	return subnet, nil
}

// pick takes the requested address, or the lowest free one when none is
// requested, in the pool's allocator.
func (ps *poolState) pick(requested netip.Addr, claim Claim) (netip.Addr, error) {
	if !requested.IsValid() {
		return ps.alloc.Next()
	}
	if h, ok := ps.domain.held[requested]; ok {
		return netip.Addr{}, ps.unavailable(requested, h, claim)
	}
	err := ps.alloc.Allocate(requested)
	if errors.Is(err, cidr.ErrNotAllocatable) {
		return netip.Addr{}, fmt.Errorf("%w: requested address %s is not one the pool hands out: it lies outside its addresses, or is a gateway, network, broadcast, anycast or excluded address",
			ErrRequestedUnavailable, requested)
	}
	return requested, err
}

// unavailable says that requested is held by h, naming only what the
// claim's namespace may see.
func (ps *poolState) unavailable(requested netip.Addr, h Holder, claim Claim) error {
	return fmt.Errorf("%w: requested address %s is held by %s", ErrRequestedUnavailable, requested, describe(ps.key, h, claim))
}

// conflict says that ip, which the claim's IPAddress names, is h's.
func (ps *poolState) conflict(ip netip.Addr, h Holder, claim Claim) error {
	return fmt.Errorf("%w: address %s of claim %s is also held by %s", ErrConflict, ip, claim.Name, describe(ps.key, h, claim))
}

// describe names a holder of an address of pool as seen from the claim's
// namespace: a claim of the same namespace by name, anything else without
// naming it.
func describe(pool poolref.Key, h Holder, claim Claim) string {
	switch {
	case h.Pool != pool:
		return "another pool of its VRF"
	case h.Retired && h.Claim.Namespace == claim.Namespace:
		return "claim " + h.Claim.String() + ", whose IPAddress was left without it (moved to another management cluster)"
	case h.Retired:
		return "an address moved to another management cluster"
	case h.Claim.Namespace == claim.Namespace:
		return "claim " + h.Claim.String()
	}
	return "a claim in another namespace"
}

// take records that h holds ip, and marks it taken in every pool of the
// domain that could hand it out.
func (d *domain) take(ip netip.Addr, h Holder) {
	d.held[ip] = h
	for _, ps := range d.pools {
		if ps.alloc != nil {
			_ = ps.alloc.Allocate(ip) // not in the space, or taken already: nothing to do
		}
	}
}

// give undoes take, and returns the pools that gained a free address.
func (d *domain) give(ip netip.Addr) []poolref.Key {
	delete(d.held, ip)
	var gained []poolref.Key
	for key, ps := range d.pools {
		if ps.alloc != nil && ps.alloc.Release(ip) == nil {
			gained = append(gained, key)
		}
	}
	return gained
}

// leave drops a pool's state from the domain and frees in memory what it
// held there; its records stay until its claims release them.
func (d *domain) leave(ps *poolState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ps.left = true
	if d.pools[ps.key] != ps {
		return
	}
	delete(d.pools, ps.key)
	for ip, h := range d.held {
		if h.Pool == ps.key {
			d.give(ip)
		}
	}
}
