package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

// The model test runs two processes (registries, as two replicas or a
// frozen leader and its successor) over one store, the API server, and
// drives them with random interleavings of claim reconciles (acquire, or
// adopt when the claim has an IPAddress), claim deletions (release), pool
// spec updates, stale reads of pools, restarts (reseeds) and IPAddress
// creations that fail after an allocation. The reference is deliberately
// simple: the set of IPAddresses, one per claim, and each pool's spec
// history. After every step no two IPAddresses share an address, and
// every address handed out is one the newest spec the process had seen
// allows (never a gateway or an excluded address).

// memStore is a Store in memory: what the API server would keep.
type memStore struct {
	mu      sync.Mutex
	records map[string]map[netip.Addr]Record // by domain
	// addresses are the IPAddresses, by claim; domainOf maps a pool to its domain.
	addresses map[types.NamespacedName]ipAddress
	domainOf  map[poolref.Key]string
	// now, when set, stamps the records written (Record.Recorded).
	now func() time.Time
	// marks are the domains' markers (see Marked).
	marks map[string]string
}

type ipAddress struct {
	pool  poolref.Key
	claim Claim
	ip    netip.Addr
	// legacy: made before records existed; recorded when its domain is seeded.
	legacy bool
}

func newMemStore() *memStore {
	return &memStore{records: map[string]map[netip.Addr]Record{}, addresses: map[types.NamespacedName]ipAddress{}, domainOf: map[poolref.Key]string{}, marks: map[string]string{}}
}

func (s *memStore) Mark(_ context.Context, domain string, bits int) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next, mixed := Marked(s.marks[domain], bits)
	s.marks[domain] = next
	return mixed, nil
}

func (s *memStore) Records(_ context.Context, domain string) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Record
	for _, r := range s.records[domain] {
		out = append(out, r)
	}
	return out, nil
}

func (s *memStore) LiveRecords(ctx context.Context, domain string) ([]Record, error) {
	return s.Records(ctx, domain)
}

func (s *memStore) Reserve(_ context.Context, domain string, r Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.records[domain] == nil {
		s.records[domain] = map[netip.Addr]Record{}
	}
	if existing, ok := s.records[domain][r.Address]; ok {
		return &TakenError{Address: r.Address, Holder: existing.Holder}
	}
	if s.now != nil {
		r.Recorded = s.now()
	}
	s.records[domain][r.Address] = r
	return nil
}

func (s *memStore) Unreserve(_ context.Context, domain string, r Record) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	existing, ok := s.records[domain][r.Address]
	if !ok || !existing.Holder.Claim.Same(r.Holder.Claim) || existing.Holder.Retired || !r.Recorded.IsZero() && !existing.Recorded.Equal(r.Recorded) {
		return false, nil
	}
	delete(s.records[domain], r.Address)
	return true, nil
}

func (s *memStore) Free(_ context.Context, claim Claim, _ string, _ []netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, records := range s.records {
		for ip, r := range records {
			if r.Holder.Claim.UID == claim.UID && !r.Holder.Retired {
				delete(records, ip)
			}
		}
	}
	return nil
}

func (s *memStore) Retire(_ context.Context, domain string, r Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if existing, ok := s.records[domain][r.Address]; ok && existing.Holder.Claim.UID == r.Holder.Claim.UID {
		existing.Holder.Retired = true
		s.records[domain][r.Address] = existing
	}
	return nil
}

func (s *memStore) ForgetRetired(_ context.Context, domain string, pool poolref.Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, d := range s.domainOf {
		if d == domain && key != pool {
			return nil
		}
	}
	for ip, r := range s.records[domain] {
		if r.Holder.Retired {
			delete(s.records[domain], ip)
		}
	}
	return nil
}

func (s *memStore) Addresses(_ context.Context, domain string) ([]Record, error) {
	return s.addressesOf(func(key poolref.Key) bool { return s.domainOf[key] == domain }), nil
}

func (s *memStore) PoolAddresses(_ context.Context, pool poolref.Key) ([]Record, error) {
	return s.addressesOf(func(key poolref.Key) bool { return key == pool }), nil
}

func (s *memStore) addressesOf(match func(poolref.Key) bool) []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Record
	for _, a := range s.addresses {
		if match(a.pool) {
			out = append(out, Record{Address: a.ip, Holder: Holder{Pool: a.pool, Claim: a.claim}})
		}
	}
	return out
}

// modelPool is one pool and the history of its reads: reads[i] is the pool
// after its i-th update; a stale read is an older one.
type modelPool struct {
	key   poolref.Key
	reads []*v1alpha1.MetalVRFIPPool
}

func (p *modelPool) latest() *v1alpha1.MetalVRFIPPool { return p.reads[len(p.reads)-1] }

// process is one registry and the newest read of each pool it was given.
type process struct {
	reg  *Registry
	seen map[poolref.Key]int
}

// window is the addresses the model's pools and requests reach.
var window = func() []netip.Addr {
	var out []netip.Addr
	for a := netip.MustParseAddr("10.0.0.0"); a.Less(netip.MustParseAddr("10.0.0.32")); a = a.Next() {
		out = append(out, a)
	}
	return out
}()

func TestRegistryModel(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runModel(t, seed, 400) })
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	ctx := context.Background()
	store := newMemStore()
	rv := 0
	nextRV := func() string { rv++; return strconv.Itoa(rv) }

	// Two overlapping pools of one VRF, and a pool of its own.
	vrf := &v1alpha1.VRFSource{ID: "vrf-1", CredentialsRef: v1alpha1.SecretReference{Name: "metal"}}
	mkPool := func(ns, name string, withVRF bool, addresses ...string) *modelPool {
		pool := &v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name + "-uid"), Generation: 1, ResourceVersion: nextRV()},
			Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: addresses, Prefix: ptr.To(int32(27)), Gateway: "10.0.0.1"},
		}
		if withVRF {
			pool.Spec.VRF = vrf.DeepCopy()
			pool.Status.VRF = &v1alpha1.ResolvedVRF{ID: "vrf-1", ProjectID: "project-1"}
		}
		p := &modelPool{key: poolref.KeyOf(pool), reads: []*v1alpha1.MetalVRFIPPool{pool}}
		store.domainOf[p.key] = DomainOf(pool)
		return p
	}
	pools := []*modelPool{
		mkPool("team-a", "a", true, "10.0.0.0/28"),
		mkPool("team-b", "b", true, "10.0.0.8-10.0.0.20"),
		mkPool("team-a", "own", false, "10.0.0.0/29"),
	}

	// Claims: a name per slot, a new UID per incarnation.
	type claimSlot struct {
		Claim
		pool *modelPool
	}
	var claims []*claimSlot
	incarnation := 0
	newUID := func() types.UID { incarnation++; return types.UID(fmt.Sprintf("uid-%d", incarnation)) }
	for i := range 14 {
		p := pools[i%len(pools)]
		claims = append(claims, &claimSlot{Claim: Claim{NamespacedName: types.NamespacedName{Namespace: p.key.Namespace, Name: fmt.Sprintf("c%d", i)}, UID: newUID()}, pool: p})
	}

	// IPAddresses made before records existed: adopted at seeding.
	for i, c := range claims[:3] {
		store.addresses[c.NamespacedName] = ipAddress{pool: c.pool.key, claim: c.Claim, ip: netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", 2+2*i)), legacy: true}
	}

	procs := []*process{{reg: New(store, nil, ""), seen: map[poolref.Key]int{}}, {reg: New(store, nil, ""), seen: map[poolref.Key]int{}}}

	// read returns a read of the pool for process p: mostly the newest,
	// sometimes one older than what p has seen already.
	read := func(p *process, mp *modelPool) v1alpha1.Pool {
		newest := len(mp.reads) - 1
		if rng.IntN(3) == 0 {
			return mp.reads[rng.IntN(p.seen[mp.key]+1)]
		}
		p.seen[mp.key] = newest
		return mp.reads[newest]
	}

	// retired are the addresses of each domain whose claim moved away
	// leaving its IPAddress: out of use for good.
	retired := map[string]map[netip.Addr]bool{}
	checkNoDuplicate := func(step int, what string) {
		t.Helper()
		byDomain := map[string]map[netip.Addr]types.NamespacedName{}
		for name, a := range store.addresses {
			d := store.domainOf[a.pool]
			if retired[d][a.ip] {
				t.Fatalf("step %d (%s): retired %s handed out to %s", step, what, a.ip, name)
			}
			if byDomain[d] == nil {
				byDomain[d] = map[netip.Addr]types.NamespacedName{}
			}
			if other, dup := byDomain[d][a.ip]; dup {
				t.Fatalf("step %d (%s): %s handed out to %s and %s", step, what, a.ip, other, name)
			}
			byDomain[d][a.ip] = name
			if r, ok := store.records[d][a.ip]; !a.legacy && (!ok || r.Holder.Claim.UID != a.claim.UID) {
				t.Fatalf("step %d (%s): IPAddress %s of %s has no record of its own: %+v", step, what, a.ip, name, r)
			}
		}
	}

	for step := range steps {
		p := procs[rng.IntN(len(procs))]
		switch op := rng.IntN(20); {
		case op < 11: // reconcile a claim
			c := claims[rng.IntN(len(claims))]
			pool := read(p, c.pool)
			if a, ok := store.addresses[c.NamespacedName]; ok {
				if err := p.reg.Adopt(ctx, pool, c.Claim, a.ip); err != nil {
					t.Fatalf("step %d: adopt %s of %s: %v", step, a.ip, c.Name, err)
				}
				break
			}
			var requested netip.Addr
			if rng.IntN(4) == 0 {
				requested = window[rng.IntN(len(window))]
			}
			recorded := map[netip.Addr]bool{} // what the claim held before
			for _, records := range store.records {
				for ip, r := range records {
					if r.Holder.Claim.UID == c.UID {
						recorded[ip] = true
					}
				}
			}
			ip, _, err := p.reg.Acquire(ctx, pool, c.Claim, requested)
			switch {
			case errors.Is(err, cidr.ErrExhausted), errors.Is(err, ErrRequestedUnavailable):
				break
			case errors.Is(err, ErrPoolNotReady) && c.pool.reads[p.seen[c.pool.key]].Status.VRF == nil && c.pool.latest().Spec.VRF != nil:
				break // its VRF is not read with its credentials (now)
			case err != nil:
				t.Fatalf("step %d: acquire for %s: %v", step, c.Name, err)
			case recorded[ip]:
				// The claim held it already (its IPAddress was not created):
				// it keeps it whatever the spec says since.
				store.addresses[c.NamespacedName] = ipAddress{pool: c.pool.key, claim: c.Claim, ip: ip}
			default:
				newest := c.pool.reads[p.seen[c.pool.key]]
				space, errs := poolspace.Resolve(&newest.Spec, nil)
				if len(errs) > 0 {
					t.Fatalf("step %d: spec does not resolve: %v", step, errs)
				}
				if !space.Contains(ip) {
					t.Fatalf("step %d: %s handed %s, which spec generation %d of %s does not hand out (gateway %s, excluded %v)",
						step, c.Name, ip, newest.Generation, c.pool.key, newest.Spec.Gateway, newest.Spec.ExcludedAddresses)
				}
				if rng.IntN(8) != 0 { // else creating the IPAddress failed
					store.addresses[c.NamespacedName] = ipAddress{pool: c.pool.key, claim: c.Claim, ip: ip}
				}
			}
			checkNoDuplicate(step, "reconcile "+c.Name)
		case op < 12: // someone else (clusterctl move, a restore) creates a claim's IPAddress
			// A claim with an IPAddress already: the creation is admitted,
			// then fails (another replica created the claim's first).
			c := claims[rng.IntN(len(claims))]
			_, exists := store.addresses[c.NamespacedName]
			ip := window[rng.IntN(len(window))]
			pool := read(p, c.pool)
			// The registry judges by the newest read it was given; the
			// claim's own recorded address (the manager's IPAddress) is
			// not judged again.
			newest := c.pool.reads[p.seen[c.pool.key]]
			space, errs := poolspace.Resolve(&newest.Spec, nil)
			handsOut := len(errs) == 0 && space.Contains(ip)
			own := store.records[store.domainOf[c.pool.key]][ip].Holder.Claim == c.Claim
			err := p.reg.Admit(ctx, pool, c.Claim, ip)
			switch {
			case err == nil && !handsOut && !own:
				t.Fatalf("step %d: admitted %s for %s, which the pool's newest read does not hand out", step, ip, c.Name)
			case errors.Is(err, ErrNotInPool) && handsOut:
				t.Fatalf("step %d: refused %s for %s, which the pool's read hands out: %v", step, ip, c.Name, err)
			case err == nil && exists:
			case err == nil:
				store.addresses[c.NamespacedName] = ipAddress{pool: c.pool.key, claim: c.Claim, ip: ip}
			case errors.Is(err, ErrConflict), errors.Is(err, ErrPoolNotReady), errors.Is(err, ErrNotInPool):
				// refused: the IPAddress is not created
			default:
				t.Fatalf("step %d: admit %s for %s: %v", step, ip, c.Name, err)
			}
			checkNoDuplicate(step, "admit "+c.Name)
		case op < 13: // a claim moves away and leaves its IPAddress, which is retired and deleted
			c := claims[rng.IntN(len(claims))]
			a, ok := store.addresses[c.NamespacedName]
			if !ok {
				break
			}
			if _, err := p.reg.Retire(ctx, read(p, c.pool), c.Claim, a.ip); errors.Is(err, ErrPoolNotReady) {
				break
			} else if err != nil {
				t.Fatalf("step %d: retire %s of %s: %v", step, a.ip, c.Name, err)
			}
			delete(store.addresses, c.NamespacedName)
			d := store.domainOf[c.pool.key]
			if retired[d] == nil {
				retired[d] = map[netip.Addr]bool{}
			}
			retired[d][a.ip] = true
			c.UID = newUID()
		case op < 14: // delete a claim: its IPAddress goes, then its address is released
			c := claims[rng.IntN(len(claims))]
			delete(store.addresses, c.NamespacedName)
			if _, err := p.reg.Release(ctx, c.pool.key, c.Claim); err != nil {
				t.Fatalf("step %d: release %s: %v", step, c.Name, err)
			}
			for _, records := range store.records {
				for ip, r := range records {
					if r.Holder.Claim.UID == c.UID {
						t.Fatalf("step %d: %s still recorded for released claim %s", step, ip, c.Name)
					}
				}
			}
			c.UID = newUID() // the same name comes back as another claim
		case op < 17: // a spec update: another gateway, or an address excluded
			mp := pools[rng.IntN(len(pools))]
			next := mp.latest().DeepCopy()
			next.Generation++
			next.ResourceVersion = nextRV()
			if rng.IntN(2) == 0 {
				next.Spec.Gateway = window[1+rng.IntN(30)].String()
			} else {
				next.Spec.ExcludedAddresses = append(next.Spec.ExcludedAddresses, window[rng.IntN(32)].String())
			}
			if _, errs := poolspace.Resolve(&next.Spec, nil); len(errs) > 0 {
				break // the webhook would refuse it
			}
			mp.reads = append(mp.reads, next)
		case op < 18: // a status-only write: a newer read, same generation
			mp := pools[rng.IntN(len(pools))]
			next := mp.latest().DeepCopy()
			next.ResourceVersion = nextRV()
			if next.Spec.VRF != nil && rng.IntN(3) == 0 {
				// The VRF is lost to the pool's credentials, or read again:
				// the pool leaves its domain, or comes back.
				if next.Status.VRF == nil {
					next.Status.VRF = &v1alpha1.ResolvedVRF{ID: "vrf-1", ProjectID: "project-1"}
				} else {
					next.Status.VRF = nil
				}
			}
			mp.reads = append(mp.reads, next)
		case op < 19: // a restart: the process forgets everything and reseeds
			*p = process{reg: New(store, nil, ""), seen: map[poolref.Key]int{}}
		default: // counts, as the pool reconciler reads them
			mp := pools[rng.IntN(len(pools))]
			if _, err := p.reg.Stats(ctx, read(p, mp)); err != nil {
				t.Fatalf("step %d: stats: %v", step, err)
			}
		}
	}
}

// TestRegistryConcurrent runs the same processes from many goroutines at
// once on one pool (with -race, it also checks the locking): every claim
// gets an address of its own.
func TestRegistryConcurrent(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	pool := &v1alpha1.MetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pool", UID: "pool-uid", Generation: 1, ResourceVersion: "1"},
		Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.1.0.0/24"}, Prefix: ptr.To(int32(24)), Gateway: "10.1.0.1"},
	}
	store.domainOf[poolref.KeyOf(pool)] = DomainOf(pool)
	regs := []*Registry{New(store, nil, ""), New(store, nil, "")}
	const claims = 200
	got := make([]netip.Addr, claims)
	var wg sync.WaitGroup
	for i := range claims {
		wg.Go(func() {
			claim := Claim{NamespacedName: types.NamespacedName{Namespace: "ns", Name: fmt.Sprint(i)}, UID: types.UID(fmt.Sprint(i))}
			ip, _, err := regs[i%2].Acquire(ctx, pool, claim, netip.Addr{})
			if err != nil {
				t.Errorf("claim %d: %v", i, err)
			}
			got[i] = ip
		})
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	for i, ip := range got {
		if j, dup := seen[ip]; dup {
			t.Fatalf("%s handed out to claims %d and %d", ip, j, i)
		}
		if ip == netip.MustParseAddr("10.1.0.1") {
			t.Fatalf("the gateway was handed out to claim %d", i)
		}
		seen[ip] = i
	}
}
