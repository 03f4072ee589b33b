package registry

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

func (s *memStore) ClaimRecords(_ context.Context, domain string, claim Claim) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Record
	for _, r := range s.records[domain] {
		if r.Holder.Claim.Same(claim) {
			out = append(out, r)
		}
	}
	return out, nil
}

func (s *memStore) ClaimAddresses(_ context.Context, claim Claim) ([]netip.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []netip.Addr
	for _, a := range s.addresses {
		if a.claim.NamespacedName == claim.NamespacedName {
			out = append(out, a.ip)
		}
	}
	return out, nil
}

func (s *memStore) Confirm(ctx context.Context, domain string, r Record) error {
	err := s.Reserve(ctx, domain, r)
	var taken *TakenError
	if !errors.As(err, &taken) || !taken.Holder.Claim.Same(r.Holder.Claim) || taken.Holder.Retired {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if existing, ok := s.records[domain][r.Address]; ok && s.now != nil {
		existing.Recorded = s.now()
		s.records[domain][r.Address] = existing
	}
	return nil
}

// reapFixture is one registry over a store sharing its clock, a global pool
// of 10.9.0.2-10.9.0.6 and a claim bound to 10.9.0.2, whose IPAddress
// exists.
type reapFixture struct {
	ctx   context.Context
	store *memStore
	reg   *Registry
	now   time.Time
	claim Claim
	kept  netip.Addr
}

func newReapFixture(t *testing.T) *reapFixture {
	t.Helper()
	f := &reapFixture{ctx: context.Background(), store: newMemStore(), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), claim: claimNamed("a", "bound")}
	f.store.now = func() time.Time { return f.now }
	f.reg = New(f.store, nil, "here")
	f.reg.now = f.store.now
	pool := globalPool("here")
	f.store.domainOf[poolref.KeyOf(pool)] = DomainOf(pool)
	ip, _, err := f.reg.Acquire(f.ctx, pool, f.claim, netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	f.kept = ip
	f.createAddress(f.claim.Name, f.claim, ip)
	return f
}

// createAddress stands for an IPAddress named name of the claim that was created.
func (f *reapFixture) createAddress(name string, claim Claim, ip netip.Addr) {
	f.store.addresses[types.NamespacedName{Namespace: claim.Namespace, Name: name}] = ipAddress{pool: poolref.KeyOf(globalPool("here")), claim: claim, ip: ip}
}

// admit admits an IPAddress of the claim with address ip, whose creation then fails.
func (f *reapFixture) admit(t *testing.T, claim Claim, ip string) {
	t.Helper()
	if err := f.reg.Admit(f.ctx, globalPool("here"), claim, netip.MustParseAddr(ip)); err != nil {
		t.Fatalf("admitting %s: %v", ip, err)
	}
}

func (f *reapFixture) recorded(claim Claim) []netip.Addr {
	records, _ := f.store.ClaimRecords(f.ctx, DomainOf(globalPool("here")), claim)
	var out []netip.Addr
	for _, r := range records {
		out = append(out, r.Address)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func (f *reapFixture) reap(t *testing.T) Reaped {
	t.Helper()
	reaped, err := f.reg.Reap(f.ctx, globalPool("here"), f.claim, false)
	if err != nil {
		t.Fatal(err)
	}
	return reaped
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// The records of IPAddresses that were admitted and not created are reaped
// once older than the grace period, and their addresses are free again;
// the claim's own address stays.
func TestReapFreesAbsentOldRecords(t *testing.T) {
	f := newReapFixture(t)
	f.admit(t, f.claim, "10.9.0.3")
	f.admit(t, f.claim, "10.9.0.4")
	f.now = f.now.Add(DefaultPendingGrace + time.Second)
	reaped := f.reap(t)
	if !slices.Equal(sorted(reaped.Addresses), addrs("10.9.0.3", "10.9.0.4")) || reaped.Pending != 0 {
		t.Fatalf("reaped %v, %d pending; want 10.9.0.3 and 10.9.0.4, none pending", reaped.Addresses, reaped.Pending)
	}
	if got := f.recorded(f.claim); !slices.Equal(got, []netip.Addr{f.kept}) {
		t.Fatalf("the claim's records after the reap: %v, want only its own %s", got, f.kept)
	}
	ip, _, err := f.reg.Acquire(f.ctx, globalPool("here"), claimNamed("b", "later"), netip.MustParseAddr("10.9.0.3"))
	if err != nil || ip != netip.MustParseAddr("10.9.0.3") {
		t.Fatalf("a later claim cannot have the reaped 10.9.0.3: %s, %v", ip, err)
	}
}

// The record of an IPAddress admitted for a claim that does not exist, and
// not created, is the only one of that claim, so the claim "holds" it: it
// is reaped once the claim is known gone, not while it may exist, and not
// once its IPAddress exists.
func TestReapFreesTheAddressOfAClaimThatIsGone(t *testing.T) {
	f := newReapFixture(t)
	ghost := claimNamed("a", "ghost")
	f.admit(t, ghost, "10.9.0.3")
	f.now = f.now.Add(DefaultPendingGrace + time.Second)
	reap := func(gone bool) Reaped {
		t.Helper()
		reaped, err := f.reg.Reap(f.ctx, globalPool("here"), ghost, gone)
		if err != nil {
			t.Fatal(err)
		}
		return reaped
	}
	if reaped := reap(false); len(reaped.Addresses) != 0 {
		t.Fatalf("reaped %v of a claim that may exist", reaped.Addresses)
	}
	if reaped := reap(true); !slices.Equal(reaped.Addresses, addrs("10.9.0.3")) {
		t.Fatalf("reaped %v of a claim that is gone, want 10.9.0.3", reaped.Addresses)
	}
	if got := f.recorded(ghost); len(got) != 0 {
		t.Fatalf("records of the gone claim after the reap: %v", got)
	}
	ip, _, err := f.reg.Acquire(f.ctx, globalPool("here"), claimNamed("b", "later"), netip.MustParseAddr("10.9.0.3"))
	if err != nil || ip != netip.MustParseAddr("10.9.0.3") {
		t.Fatalf("a later claim cannot have the reaped 10.9.0.3: %s, %v", ip, err)
	}

	// One whose IPAddress exists (restored before its claim) stays.
	early := claimNamed("a", "early")
	f.admit(t, early, "10.9.0.4")
	f.createAddress("early", early, netip.MustParseAddr("10.9.0.4"))
	f.now = f.now.Add(DefaultPendingGrace + time.Second)
	if reaped, err := f.reg.Reap(f.ctx, globalPool("here"), early, true); err != nil || len(reaped.Addresses) != 0 {
		t.Fatalf("reaped %v (%v) of a claim whose IPAddress exists", reaped.Addresses, err)
	}
}

// What is reaped is only what a live read shows without IPAddress, after
// the grace period, and neither the claim's own address nor a retired one.
func TestReapKeeps(t *testing.T) {
	for name, tc := range map[string]struct {
		setup   func(t *testing.T, f *reapFixture)
		elapsed time.Duration
		pending int
	}{
		"an address whose IPAddress exists, under another name": {
			setup: func(t *testing.T, f *reapFixture) {
				f.admit(t, f.claim, "10.9.0.3")
				f.createAddress("restored", f.claim, netip.MustParseAddr("10.9.0.3"))
			},
			elapsed: DefaultPendingGrace + time.Second,
		},
		"an address recorded within the grace period": {
			setup:   func(t *testing.T, f *reapFixture) { f.admit(t, f.claim, "10.9.0.3") },
			elapsed: DefaultPendingGrace - time.Second,
			pending: 1,
		},
		"an address admitted again within the grace period": {
			setup: func(t *testing.T, f *reapFixture) {
				f.admit(t, f.claim, "10.9.0.3")
				f.now = f.now.Add(DefaultPendingGrace)
				f.admit(t, f.claim, "10.9.0.3")
			},
			elapsed: time.Second,
			pending: 1,
		},
		"a retired address": {
			setup: func(t *testing.T, f *reapFixture) {
				f.admit(t, f.claim, "10.9.0.3")
				if _, err := f.reg.Retire(f.ctx, globalPool("here"), f.claim, netip.MustParseAddr("10.9.0.3")); err != nil {
					t.Fatal(err)
				}
			},
			elapsed: DefaultPendingGrace + time.Second,
		},
		"the claim's own address, its IPAddress gone and being created again": {
			setup: func(t *testing.T, f *reapFixture) {
				delete(f.store.addresses, f.claim.NamespacedName)
			},
			elapsed: DefaultPendingGrace + time.Second,
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newReapFixture(t)
			tc.setup(t, f)
			before := f.recorded(f.claim)
			f.now = f.now.Add(tc.elapsed)
			reaped := f.reap(t)
			if len(reaped.Addresses) != 0 || reaped.Pending != tc.pending {
				t.Fatalf("reaped %v with %d pending, want nothing reaped and %d pending", reaped.Addresses, reaped.Pending, tc.pending)
			}
			if got := f.recorded(f.claim); !slices.Equal(got, before) {
				t.Fatalf("records %v became %v", before, got)
			}
			if reaped.Pending > 0 && (reaped.RetryAfter <= 0 || reaped.RetryAfter > DefaultPendingGrace) {
				t.Fatalf("retry after %s, want within the grace period", reaped.RetryAfter)
			}
		})
	}
}

// A claim has at most MaxPending records of IPAddresses that were not
// created; more are refused, naming them, until they are reaped. The same
// IPAddress admitted again (a retried move) is not refused.
func TestAdmitBoundsPendingRecords(t *testing.T) {
	for name, fenced := range map[string]bool{"allocating replica": false, "fenced replica": true} {
		t.Run(name, func(t *testing.T) {
			f := newReapFixture(t)
			admitter := f.reg
			if fenced {
				admitter = New(f.store, func() error { return ErrFenced }, "here")
				admitter.now = f.reg.now
			}
			// Grown to a /28: the fifth address must be one the pool hands out.
			pool := globalPool("here")
			pool.Spec.Addresses, pool.Spec.Prefix, pool.Generation = []string{"10.9.0.0/28"}, ptr.To(int32(28)), 2
			for _, ip := range []string{"10.9.0.3", "10.9.0.4", "10.9.0.5", "10.9.0.6"} {
				if err := admitter.Admit(f.ctx, pool, f.claim, netip.MustParseAddr(ip)); err != nil {
					t.Fatalf("admitting %s: %v", ip, err)
				}
			}
			if err := admitter.Admit(f.ctx, pool, f.claim, netip.MustParseAddr("10.9.0.4")); err != nil {
				t.Fatalf("admitting a pending address again: %v", err)
			}
			fifth := netip.MustParseAddr("10.9.0.9")
			err := admitter.Admit(f.ctx, pool, f.claim, fifth)
			var pending *PendingError
			if !errors.Is(err, ErrTooManyPending) || !errors.As(err, &pending) {
				t.Fatalf("a fifth pending address was admitted: %v", err)
			}
			if !slices.Equal(pending.Pending, addrs("10.9.0.3", "10.9.0.4", "10.9.0.5", "10.9.0.6")) || pending.Claim != f.claim {
				t.Fatalf("the refusal names %v of %v", pending.Pending, pending.Claim)
			}
			if slices.Contains(f.recorded(f.claim), fifth) {
				t.Fatalf("the refused %s was recorded", fifth)
			}
			f.now = f.now.Add(DefaultPendingGrace + time.Second)
			if reaped := f.reap(t); len(reaped.Addresses) != MaxPending {
				t.Fatalf("reaped %v", reaped.Addresses)
			}
			if err := admitter.Admit(f.ctx, pool, f.claim, netip.MustParseAddr("10.9.0.3")); err != nil {
				t.Fatalf("admitting after the reap: %v", err)
			}
		})
	}
}

// A claim whose IPAddress is created again, long after its address was
// recorded, confirms the record first: one reaped meanwhile elsewhere, and
// taken by another claim, is not served again.
func TestAcquireConfirmsAnOldRecord(t *testing.T) {
	f := newReapFixture(t)
	pool := globalPool("here")
	waiting := claimNamed("a", "waiting")
	ip, _, err := f.reg.Acquire(f.ctx, pool, waiting, netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	// Its IPAddress was not created; another process reaped the record,
	// and handed the address to another claim.
	f.now = f.now.Add(DefaultPendingGrace + time.Second)
	domain := DomainOf(pool)
	delete(f.store.records[domain], ip)
	if err := f.store.Reserve(f.ctx, domain, Record{Address: ip, Holder: Holder{Pool: poolref.KeyOf(pool), Claim: claimNamed("b", "other")}}); err != nil {
		t.Fatal(err)
	}
	again, _, err := f.reg.Acquire(f.ctx, pool, waiting, netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if again == ip {
		t.Fatalf("the claim was served %s again, which another claim holds now", ip)
	}
	if got := f.recorded(waiting); !slices.Equal(got, []netip.Addr{again}) {
		t.Fatalf("the claim's records are %v, want %s", got, again)
	}
}

func sorted(a []netip.Addr) []netip.Addr {
	a = slices.Clone(a)
	slices.SortFunc(a, netip.Addr.Compare)
	return a
}

// confirmingStore runs confirm once, between Reap's read of the claim's
// records and its first delete.
type confirmingStore struct {
	*memStore
	confirm func()
}

func (s *confirmingStore) Unreserve(ctx context.Context, domain string, r Record) (bool, error) {
	if confirm := s.confirm; confirm != nil {
		s.confirm = nil
		confirm()
	}
	return s.memStore.Unreserve(ctx, domain, r)
}

// A record confirmed after Reap read it (the IPAddress admitted again, on
// its way) is kept: Reap deletes only the record as it read it.
func TestReapKeepsARecordConfirmedMeanwhile(t *testing.T) {
	f := newReapFixture(t)
	f.admit(t, f.claim, "10.9.0.3")
	f.now = f.now.Add(DefaultPendingGrace + time.Second)
	f.reg.store = &confirmingStore{memStore: f.store, confirm: func() { f.admit(t, f.claim, "10.9.0.3") }}
	reaped := f.reap(t)
	if len(reaped.Addresses) != 0 || reaped.Pending != 1 {
		t.Fatalf("reaped %v with %d pending, want nothing reaped and 1 pending", reaped.Addresses, reaped.Pending)
	}
	if got := f.recorded(f.claim); !slices.Equal(got, []netip.Addr{f.kept, netip.MustParseAddr("10.9.0.3")}) {
		t.Fatalf("the claim's records after the reap: %v, want %s and 10.9.0.3", got, f.kept)
	}
}
