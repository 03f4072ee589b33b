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
//
// # The life of a record
//
// In a domain that allocates, an address is in use while it has a record
// in the Store, and free when it has none. A record is pending while no
// IPAddress names its address (read live), held once one does, or retired.
// Whether its IPAddress exists yet decides the Store method that writes a
// record: Confirm before it is created (create the record, or mark the
// claim's record recorded now), Reserve once it exists (create only).
// Each transition is one Store method, caused by these doors (exported
// methods) only:
//
//	from     to       Store method   door: when
//	none     pending  Confirm        Acquire: a claim is served a free address,
//	                                 whose IPAddress it creates next
//	                                 Admit: another writer (clusterctl move, a
//	                                 restore) creates an IPAddress
//	pending  pending  Confirm        Acquire, Admit: the IPAddress is created
//	                                 again (an earlier creation failed)
//	pending  held     none           the IPAddress is created (nothing is written)
//	pending  none     Unreserve      Reap: no IPAddress named it for the grace
//	                                 period
//	none     held     Reserve        Adopt: an IPAddress of the claim has none
//	                                 (made past the webhook); seeding does it
//	                                 for those made before records existed
//	held     none     Unreserve      Adopt: the claim's IPAddress names another
//	held     none     Free           Release: the claim's IPAddress is gone
//	held     retired  Retire         Retire: clusterctl move took the claim of a
//	                                 global pool's IPAddress with its Cluster
//	                                 (the address reconciler finds the Cluster
//	                                 gone)
//	retired  none     ForgetRetired  Forget: the domain's last pool is deleted
//
// Two transitions have two doors, on purpose. none→pending: the manager's
// own IPAddress (Acquire picks the address, in the leader, fenced) or
// another writer's (Admit is given it, in whichever replica serves the
// webhook, unfenced, and a claim has at most MaxPending pending records).
// held→none: one address the claim no longer holds (Adopt), or every one
// once its IPAddress is gone (Release).
//
// A door that cannot finish undoes its own write, which is no transition
// (the record never served a claim): Acquire unreserves its record when its
// pool left the domain meanwhile, or another claim's record overlaps it
// (overlap.go); Adopt, when its pool does not hand out the address it
// recorded; Reap confirms again a record it deleted whose address the claim
// was given meanwhile. Retire reserves a record first (none→held) for an
// address that had none. Seeding's read (Store.Records) settles the records
// of claims that are gone: one no IPAddress names goes, as Reap would take
// it (pending→none), and one an IPAddress names is kept for that
// IPAddress's claim.
//
// Why records are pending at all: an IPAddress made by another writer is
// recorded before the API server creates it (Admit, from the IPAddress
// webhook), since recorded after, a claim could be served its address in
// between and two IPAddresses would hold it; and the creation can fail
// after. That claims carry no finalizer (their release hangs on their
// IPAddress, docs/install.md) does not let this go: a record no IPAddress
// names goes only with the claim's release, and a claim whose IPAddress
// was never created has none. So Reap frees it, and Confirm keeps a reap
// from deleting the record of an IPAddress on its way, which would then
// hold an address free to be handed out again (see reap.go).
//
// A domain that does not allocate (its VRF unread) keeps no records: it
// knows in memory what its pools' IPAddresses hold, and hands out nothing.
//
// # Locks
//
// Each lock guards the fields of one struct: index.mu the index (which
// state is a pool's, which domain whose), domain.mu the domain's
// domainGuarded and its pools' poolGuarded, records.Store.loading its
// loaded (the seeding snapshot). index.mu is never held with another lock:
// find, Forget, HolderOf and Release let it go before they lock a domain,
// and nothing under a domain's lock takes it. No one holds two domains'
// locks at once. Store I/O happens under no lock but seeding's, which
// reads the store under the domain's lock, so that nothing allocates from
// a domain before it knows what is in use: the order is domain.mu, then
// the store's loading, and the store's callbacks there (records.OnSkip,
// OnStaleFence) must not call the registry. poolState.latest is an atomic pointer that
// only find replaces; the Registry's other fields are set before use.
package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// Registry hands out addresses of pools to claims.
type Registry struct {
	store Store
	// fence says whether this process may allocate now; nil when it always may.
	fence func() error
	// cluster identifies the management cluster this process runs in.
	cluster string
	// grace, now and onPending are Reap's (see SetPendingGrace, OnPending),
	// set before the registry is used.
	grace     time.Duration
	now       func() time.Time
	onPending func(pool poolref.Key, claim Claim)

	index
}

// index finds the state of a pool and its domain (see Locks above).
type index struct {
	// mu guards the fields below. Only find, Forget, HolderOf and Release
	// take it, never with another lock.
	mu    sync.Mutex
	pools map[poolref.Key]*poolState
	// domains are the domains of the pools in pools, and members counts
	// each one's pools: a domain goes with its last pool.
	domains map[string]*domain
	members map[*domain]int
}

// New returns a registry over store, in the management cluster named
// cluster. fence, when not nil, is asked before every allocation; an error
// from it refuses the allocation.
func New(store Store, fence func() error, cluster string) *Registry {
	return &Registry{
		store: store, fence: fence, cluster: cluster, grace: DefaultPendingGrace, now: time.Now, onPending: func(poolref.Key, Claim) {},
		index: index{pools: map[poolref.Key]*poolState{}, domains: map[string]*domain{}, members: map[*domain]int{}},
	}
}

// withPool runs fn on the pool's state with its domain locked, seeded, and
// built from the newest read of the pool seen. The domain is unlocked when
// withPool returns: callers that must call the store in between call
// withPool again, or domain.locked, after it.
func (r *Registry) withPool(ctx context.Context, pool v1alpha1.Pool, fn func(ps *poolState) error) error {
	return r.with(ctx, pool, true, fn)
}

// errUnseeded: the pool's addresses in use have not been read yet, and the
// caller would not wait for it.
var errUnseeded = errors.New("the pool's addresses in use have not been read yet")

// with is withPool; without seed, a pool not seeded yet fails with
// errUnseeded instead of being seeded.
func (r *Registry) with(ctx context.Context, pool v1alpha1.Pool, seed bool, fn func(ps *poolState) error) error {
	for {
		ps, left := r.find(pool)
		if left != nil {
			left.domain.leave(left)
		}
		var (
			err  error
			gone bool
		)
		ps.domain.locked(func() {
			if gone = ps.left; gone {
				return // the pool left its domain meanwhile: find its new state
			}
			if !seed && (ps.domain.held == nil || ps.byClaim == nil) {
				err = errUnseeded
				return
			}
			if err = r.prepare(ctx, ps); err == nil {
				err = fn(ps)
			}
		})
		if !gone {
			return err
		}
	}
}

// prepare seeds the pool's domain and the pool, and rebuilds the pool's
// allocator from the newest read of the pool. The caller holds the domain's
// lock; seeding reads the store under it, once per domain and pool, so that
// nothing allocates from a domain before it knows what is in use.
func (r *Registry) prepare(ctx context.Context, ps *poolState) error {
	if err := r.ensureSeeded(ctx, ps); err != nil {
		return err
	}
	latest := *ps.latest.Load()
	if ps.built == nil || ps.built.GetGeneration() != latest.GetGeneration() ||
		!equality.Semantic.DeepEqual(ps.built.PoolStatus().Resolved, latest.PoolStatus().Resolved) {
		ps.rebuild(latest)
	}
	ps.elsewhere = allocatesHere(latest, r.cluster, ps.handedOver)
	if handedOverFrom(latest, r.cluster) {
		// Read again after a restart: the domain stays handed over.
		ps.domain.handOver(latest)
	}
	if ps.elsewhere == nil {
		ps.elsewhere = ps.domain.handedOver
	}
	return nil
}

// find returns the pool's state, creating it in the right domain for a new
// pool, one deleted and created again under the same name, or one whose
// newest read puts it in another domain; left is the state it replaced.
func (r *Registry) find(pool v1alpha1.Pool) (ps, left *poolState) {
	key := poolref.KeyOf(pool)
	r.mu.Lock()
	defer r.mu.Unlock()
	ps = r.pools[key]
	if ps != nil && ps.uid == pool.GetUID() && !newer(pool, *ps.latest.Load()) {
		return ps, nil
	}
	latest := pool.DeepCopyObject().(v1alpha1.Pool)
	dkey, allocates := domainOf(latest)
	if ps != nil && ps.uid == pool.GetUID() && ps.domain.key == dkey {
		ps.latest.Store(&latest)
		return ps, nil
	}
	if ps != nil {
		left = ps
		r.dropMember(ps)
	}
	d, ok := r.domains[dkey]
	if !ok {
		d = newDomain(dkey, allocates)
		r.domains[dkey] = d
	}
	r.members[d]++
	ps = &poolState{key: key, uid: pool.GetUID(), domain: d}
	ps.latest.Store(&latest)
	r.pools[key] = ps
	return ps, left
}

// dropMember takes a pool out of its domain's members, and drops a domain
// left without members: a pool that joins it again later finds it seeded
// afresh, not with what it held when it left. The caller holds r.mu.
func (r *Registry) dropMember(ps *poolState) {
	d := ps.domain
	if r.members[d]--; r.members[d] > 0 {
		return
	}
	delete(r.members, d)
	if r.domains[d.key] == d {
		delete(r.domains, d.key)
	}
}

// Forget drops a deleted pool's state and, when it was the last pool of its
// domain, the domain's retired records: no pool is left to reuse their
// addresses.
func (r *Registry) Forget(ctx context.Context, pool v1alpha1.Pool) error {
	key := poolref.KeyOf(pool)
	if domain, allocates := domainOf(pool); allocates {
		if err := r.store.ForgetRetired(ctx, domain, key); err != nil {
			return fmt.Errorf("deleting the retired records of %s: %w", key, err)
		}
	}
	r.mu.Lock()
	ps, ok := r.pools[key]
	forget := ok && ps.uid == pool.GetUID()
	if forget {
		delete(r.pools, key)
		r.dropMember(ps)
	}
	r.mu.Unlock()
	if forget {
		ps.domain.leave(ps)
	}
	return nil
}

// DomainOf names the allocation domain of a pool.
func DomainOf(pool v1alpha1.Pool) string {
	key, _ := domainOf(pool)
	return key
}

// vrfDomain begins the key of a VRF's domain: the only one that can hold
// pools of more than one span length (see overlap.go).
const vrfDomain = "vrf/"

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
		return vrfDomain + vrf.ProjectID + "/" + vrf.ID, true
	}
	return "unresolved/" + poolref.KeyOf(pool).String(), false
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
