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

// overlaps reports two records of the domain whose spans overlap.
func overlaps(store *memStore, domain string) (string, bool) {
	store.mu.Lock()
	defer store.mu.Unlock()
	var spans []netipx.IPRange
	for ip, rec := range store.records[domain] {
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
	if pair, found := overlaps(store, "vrf/project-1/vrf-1"); found {
		t.Fatalf("records %s overlap", pair)
	}
	// The address the requesting claim backed off from is free again: only
	// its claim's records were deleted, and the prefix pool knows the
	// address as the other's.
	mustAcquire(t, a, addrPool, claimNamed("a", "after"), "10.9.0.3/26")
}

// Two processes allocate at once from an address pool and a prefix pool of
// one VRF, each seeded before either allocates: no two records overlap
// (20 addresses reach into the /28s whichever comes first).
func TestTwoProcessesOfAMixedVRFAtOnce(t *testing.T) {
	for round := range 20 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			ctx := context.Background()
			store := newMemStore()
			addrPool, prefixPool := mixedVRF()
			regs := []*Registry{seeded(t, store, addrPool, prefixPool), seeded(t, store, addrPool, prefixPool)}
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
			if pair, found := overlaps(store, "vrf/project-1/vrf-1"); found {
				t.Fatalf("records %s overlap", pair)
			}
		})
	}
}

// FuzzOverlapRule checks the rule of the check after create against every
// order its steps can take: writers each create a record (refused when one
// of the same first address exists), list the records, and then delete
// their own if the list showed another claim's overlapping it. Whatever the
// order, no two records left overlap.
func FuzzOverlapRule(f *testing.F) {
	f.Add([]byte{0, 28, 4, 0, 0, 1, 1, 0, 1})
	f.Add([]byte{20, 0, 16, 28, 2, 30, 0, 1, 2, 0, 1, 2, 0, 1, 2})
	f.Add([]byte{1, 0, 0, 26, 8, 30, 9, 0, 1, 1, 0, 0, 1, 2, 2, 2})
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

// checkOverlapRule is FuzzOverlapRule's check of one input.
func checkOverlapRule(t *testing.T, data []byte) {
	if len(data) < 4 {
		return
	}
	lengths := []int{0, 28, 30, 26}
	n := min(2+int(data[0])%3, (len(data)-1)/2)
	type writer struct {
		rec  Record
		step int
		seen []Record
	}
	writers := make([]*writer, n)
	for i := range writers {
		ip := netip.AddrFrom4([4]byte{10, 0, 0, data[1+2*i] % 64})
		bits := lengths[int(data[2+2*i])%len(lengths)]
		if bits > 0 {
			ip = netip.PrefixFrom(ip, bits).Masked().Addr()
		}
		writers[i] = &writer{rec: Record{Address: ip, Holder: Holder{Bits: bits, Claim: Claim{
			NamespacedName: types.NamespacedName{Namespace: "a", Name: fmt.Sprint("w", i)}, UID: types.UID(fmt.Sprint("w", i)),
		}}}}
	}
	store := map[netip.Addr]Record{}
	schedule := data[1+2*n:]
	for k := 0; ; k++ {
		var live []*writer
		for _, w := range writers {
			if w.step < 3 {
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
		case 0: // create
			if _, taken := store[w.rec.Address]; taken {
				w.step = 3
				continue
			}
			store[w.rec.Address] = w.rec
		case 1: // list
			for _, r := range store {
				w.seen = append(w.seen, r)
			}
		case 2: // back off
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
