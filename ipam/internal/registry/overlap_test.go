package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"

	"go4.org/netipx"
	"k8s.io/apimachinery/pkg/types"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
)

// overlaps reports two records of mixedVRF's domain whose spans overlap.
func overlaps(store *memStore) (string, bool) {
	store.mu.Lock()
	defer store.mu.Unlock()
	var spans []netipx.IPRange
	for ip, rec := range store.records["vrf/project-1/vrf-1"] {
		spans = append(spans, rec.Holder.span(ip))
	}
	if i, j, found := cidr.Overlap(spans); found {
		return fmt.Sprintf("%s and %s", spans[i], spans[j]), true
	}
	return "", false
}

// seeded returns a registry of its own process over store, with both pools
// seeded before the other process allocates: what the other hands out later
// reaches it only through the store.
func seeded(t *testing.T, store Store, pools ...v1alpha1.Pool) *Registry {
	t.Helper()
	reg := New(store, nil, "here")
	for _, pool := range pools {
		if _, err := reg.Stats(context.Background(), pool); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// Two processes, each seeded before the other allocates, one serving an
// address pool and the other a prefix pool of one VRF: the second to record
// sees the first's record overlap its own and takes other space, whichever
// of the two came first. Without the check after create, the prefix
// 10.9.0.16/28 would hold the address 10.9.0.20.
func TestTwoProcessesOfAMixedVRFBackOff(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	addrPool, prefixPool := mixedVRF()
	a := seeded(t, store, addrPool, prefixPool)
	b := seeded(t, store, addrPool, prefixPool)

	mustAcquire(t, a, addrPool, claimNamed("a", "address"), "10.9.0.2/26")
	if _, _, err := a.Acquire(ctx, addrPool, claimNamed("a", "requested"), netip.MustParseAddr("10.9.0.20")); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, b, prefixPool, claimNamed("a", "prefix"), "10.9.0.32/28")
	// The other way round: the prefix first, then an address requested in it.
	_, _, err := a.Acquire(ctx, addrPool, claimNamed("a", "late"), netip.MustParseAddr("10.9.0.33"))
	if !errors.Is(err, ErrRequestedUnavailable) {
		t.Fatalf("an address of 10.9.0.32/28, held by another process's claim, was handed out: %v", err)
	}
	mustAcquire(t, b, prefixPool, claimNamed("a", "prefix2"), "10.9.0.48/28")
	if pair, found := overlaps(store); found {
		t.Fatalf("records %s overlap", pair)
	}
	// The address the requesting claim backed off from is free again: only
	// its claim's records were deleted, and the prefix pool knows the
	// address as the other's.
	mustAcquire(t, a, addrPool, claimNamed("a", "after"), "10.9.0.3/26")
}

// Two processes sharded by --watch-filter, each of which has read only its
// own pool of the VRF: their pools do not tell them the domain is mixed,
// its marker does. Whichever records first, the other's record does not
// overlap it: an address asked for inside the prefix is refused, and the
// prefix pool skips the /28 holding the address. Without the marker both
// would be handed out.
func TestShardedProcessesOfAMixedVRF(t *testing.T) {
	ctx := context.Background()
	requested := netip.MustParseAddr("10.9.0.20")
	for _, prefixFirst := range []bool{true, false} {
		store := newMemStore()
		addrPool, prefixPool := mixedVRF()
		a, b := seeded(t, store, addrPool), seeded(t, store, prefixPool)
		if prefixFirst {
			mustAcquire(t, b, prefixPool, claimNamed("a", "prefix"), "10.9.0.16/28")
			if _, _, err := a.Acquire(ctx, addrPool, claimNamed("a", "address"), requested); !errors.Is(err, ErrRequestedUnavailable) {
				t.Errorf("an address of 10.9.0.16/28, held by the other shard, was handed out: %v", err)
			}
		} else {
			if _, _, err := a.Acquire(ctx, addrPool, claimNamed("a", "address"), requested); err != nil {
				t.Fatal(err)
			}
			mustAcquire(t, b, prefixPool, claimNamed("a", "prefix"), "10.9.0.32/28")
		}
		if pair, found := overlaps(store); found {
			t.Errorf("prefix first %v: records %s overlap", prefixFirst, pair)
		}
		// The webhook's door: an IPAddress of an address in the other
		// shard's prefix is refused (its record is left, pending, for Reap).
		inPrefix := map[bool]string{true: "10.9.0.21", false: "10.9.0.40"}[prefixFirst]
		if err := a.Admit(ctx, addrPool, claimNamed("a", "moved"), netip.MustParseAddr(inPrefix)); !errors.Is(err, ErrConflict) {
			t.Errorf("an IPAddress of %s, in the other shard's prefix, was admitted: %v", inPrefix, err)
		}
	}
}

// A replica that may not allocate, or has not read the pool's addresses
// yet, admits an IPAddress from the store alone: it knows nothing of the
// domain, the marker tells it that it is mixed.
func TestAdmitInTheStoreReadsTheMarker(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	addrPool, prefixPool := mixedVRF()
	mustAcquire(t, seeded(t, store, prefixPool), prefixPool, claimNamed("a", "prefix"), "10.9.0.16/28")
	fenced := New(store, func() error { return ErrFenced }, "here")
	if err := fenced.Admit(ctx, addrPool, claimNamed("a", "moved"), netip.MustParseAddr("10.9.0.20")); !errors.Is(err, ErrConflict) {
		t.Errorf("an IPAddress of an address of 10.9.0.16/28 was admitted: %v", err)
	}
	// The record left for Reap keeps nothing the prefix's claim holds.
	if err := fenced.Admit(ctx, addrPool, claimNamed("a", "moved2"), netip.MustParseAddr("10.9.0.5")); err != nil {
		t.Errorf("an IPAddress of a free address was refused: %v", err)
	}
}

// The read of the marker after each record: the address process marked the
// domain (one address), then its next record is created only after the
// prefix process marked it mixed, recorded 10.9.0.16/28 and listed. The
// address process's read after its create finds the marker mixed and backs
// off; without that read the address would sit in the prefix.
func TestARecordAfterTheOtherWritersListIsChecked(t *testing.T) {
	ctx := context.Background()
	store := &stalledStore{memStore: newMemStore(), entered: make(chan struct{}), release: make(chan struct{}),
		only: func(r Record) bool { return r.Holder.Bits == 0 }}
	addrPool, prefixPool := mixedVRF()
	a, b := seeded(t, store, addrPool), seeded(t, store, prefixPool)
	served := make(chan error, 1)
	go func() {
		_, _, err := a.Acquire(ctx, addrPool, claimNamed("a", "address"), netip.MustParseAddr("10.9.0.20"))
		served <- err
	}()
	<-store.entered // marked, its record not created yet
	mustAcquire(t, b, prefixPool, claimNamed("a", "prefix"), "10.9.0.16/28")
	close(store.release)
	if err := <-served; !errors.Is(err, ErrRequestedUnavailable) {
		t.Errorf("an address of 10.9.0.16/28, recorded after the prefix's writer listed, was handed out: %v", err)
	}
	if pair, found := overlaps(store.memStore); found {
		t.Errorf("records %s overlap", pair)
	}
}

// Two processes allocate at once from an address pool and a prefix pool of
// one VRF, each seeded before either allocates: no two records overlap
// (20 addresses reach into the /28s whichever comes first). In odd rounds
// each process has read only its own pool (sharded): the marker tells.
func TestTwoProcessesOfAMixedVRFAtOnce(t *testing.T) {
	for round := range 20 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			ctx := context.Background()
			store := newMemStore()
			addrPool, prefixPool := mixedVRF()
			regs := []*Registry{seeded(t, store, addrPool, prefixPool), seeded(t, store, addrPool, prefixPool)}
			if round%2 == 1 {
				regs = []*Registry{seeded(t, store, addrPool), seeded(t, store, prefixPool)}
			}
			var wg sync.WaitGroup
			for i := range 40 {
				wg.Go(func() {
					// One process serves the address pool, the other the
					// prefix pool: neither learns of the other's holdings
					// but through the store.
					reg, pool := regs[0], v1alpha1.Pool(addrPool)
					if i%2 == 1 {
						reg, pool = regs[1], prefixPool
					}
					_, _, err := reg.Acquire(ctx, pool, claimNamed("a", fmt.Sprint("c", i)), netip.Addr{})
					if err != nil && !errors.Is(err, cidr.ErrExhausted) {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if pair, found := overlaps(store); found {
				t.Fatalf("records %s overlap", pair)
			}
		})
	}
}

// FuzzOverlapRule checks the rule of the check after create, and of the
// domain's marker, against every order their steps can take: writers each
// create a record (refused when one of the same first address exists), mark
// the domain with their span length unless the marker told their process
// before that the domain is mixed (some marked it before, for an earlier
// record), then, knowing it mixed, list the records and delete their own if
// the list showed another claim's overlapping it. Whatever the order, no
// two records left overlap.
func FuzzOverlapRule(f *testing.F) {
	f.Add([]byte{0, 28, 4, 0, 0, 1, 1, 0, 1})
	f.Add([]byte{20, 0, 16, 28, 2, 30, 0, 1, 2, 0, 1, 2, 0, 1, 2})
	f.Add([]byte{1, 0, 0, 26, 8, 30, 9, 0, 1, 1, 0, 0, 1, 2, 2, 2})
	f.Add([]byte{0, 20, 0, 16, 5, 0, 1, 1, 1, 0, 0, 1, 1, 1})
	f.Fuzz(checkOverlapRule)
}

// TestOverlapRuleRandom runs FuzzOverlapRule's check on random inputs: the
// fuzzer's instrumented build is slow, the check is not.
func TestOverlapRuleRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50000 {
		data := make([]byte, 4+rng.IntN(20))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		checkOverlapRule(t, data)
		if t.Failed() {
			t.Fatalf("input %v", data)
		}
	}
}

// checkOverlapRule is FuzzOverlapRule's check of one input: data[0] picks
// the number of writers, two bytes each their address, their span length
// and whether their process marked the domain before, and the rest the
// order of their steps.
func checkOverlapRule(t *testing.T, data []byte) {
	if len(data) < 4 {
		return
	}
	lengths := []int{0, 28, 30, 26}
	n := min(2+int(data[0])%3, (len(data)-1)/2)
	type writer struct {
		rec    Record
		step   int
		before bool // its process marked the domain before
		knows  bool // the marker said mixed
		seen   []Record
	}
	writers := make([]*writer, n)
	for i := range writers {
		ip := netip.AddrFrom4([4]byte{10, 0, 0, data[1+2*i] % 64})
		bits := lengths[int(data[2+2*i])%len(lengths)]
		if bits > 0 {
			ip = netip.PrefixFrom(ip, bits).Masked().Addr()
		}
		writers[i] = &writer{before: data[2+2*i]&4 != 0, rec: Record{Address: ip, Holder: Holder{Bits: bits, Claim: Claim{
			NamespacedName: types.NamespacedName{Namespace: "a", Name: fmt.Sprint("w", i)}, UID: types.UID(fmt.Sprint("w", i)),
		}}}}
	}
	store := map[netip.Addr]Record{}
	marker := ""
	mark := func(w *writer) {
		next, mixed := Marked(marker, w.rec.Holder.Bits)
		marker, w.knows = next, w.knows || mixed
	}
	const done = 5
	schedule := data[1+2*n:]
	for k := 0; ; k++ {
		var live []*writer
		for _, w := range writers {
			if w.step < done {
				live = append(live, w)
			}
		}
		if len(live) == 0 {
			break
		}
		w := live[0]
		if k < len(schedule) {
			w = live[int(schedule[k])%len(live)]
		}
		switch w.step {
		case 0: // its process marks the domain, for an earlier record
			if w.before {
				mark(w)
			}
		case 1: // create
			if _, taken := store[w.rec.Address]; taken {
				w.step = done
				continue
			}
			store[w.rec.Address] = w.rec
		case 2: // mark, unless the marker said mixed before
			if !w.knows {
				mark(w)
			}
			if !w.knows {
				w.step = done
				continue
			}
		case 3: // list
			for _, r := range store {
				w.seen = append(w.seen, r)
			}
		case 4: // back off
			if _, found := overlapping(w.rec, w.seen); found && store[w.rec.Address].Holder.Claim == w.rec.Holder.Claim {
				delete(store, w.rec.Address)
			}
		}
		w.step++
	}
	var kept []Record
	for _, r := range store {
		kept = append(kept, r)
	}
	for _, r := range kept {
		if o, found := overlapping(r, kept); found {
			t.Errorf("records %s/%d and %s/%d are both kept", r.Address, r.Holder.Bits, o.Address, o.Holder.Bits)
			return
		}
	}
}

// overlapping finds exactly the records of other claims whose spans share
// an address with its record's, as a scan of the addresses does.
func TestOverlappingMatchesAScan(t *testing.T) {
	claim := func(name string) Claim {
		return Claim{NamespacedName: types.NamespacedName{Namespace: "a", Name: name}, UID: types.UID(name)}
	}
	for _, mine := range []Record{
		{Address: netip.MustParseAddr("10.0.0.16"), Holder: Holder{Bits: 28, Claim: claim("mine")}},
		{Address: netip.MustParseAddr("10.0.0.20"), Holder: Holder{Claim: claim("mine")}},
	} {
		for first := range 48 {
			for _, bits := range []int{0, 28, 30, 32} {
				ip := netip.AddrFrom4([4]byte{10, 0, 0, byte(first)})
				other := Record{Address: ip, Holder: Holder{Bits: bits, Claim: claim("other")}}
				want := false
				span := mine.Holder.span(mine.Address)
				for a := span.From(); span.Contains(a); a = a.Next() {
					want = want || other.Holder.span(other.Address).Contains(a)
				}
				if _, got := overlapping(mine, []Record{other}); got != want {
					t.Errorf("overlapping(%s/%d, %s/%d) = %v, want %v", mine.Address, mine.Holder.Bits, ip, bits, got, want)
				}
				same := other
				same.Holder.Claim = claim("mine")
				if _, got := overlapping(mine, []Record{same}); got {
					t.Errorf("the claim's own record %s/%d counts as another's", ip, bits)
				}
			}
		}
	}
}
