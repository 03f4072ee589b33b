package registry

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// globalPool is a GlobalMetalVRFIPPool of 10.9.0.0/29 (gateway .1) that
// management cluster allocating hands out from.
func globalPool(allocating string, annotations ...string) *v1alpha1.GlobalMetalVRFIPPool {
	pool := &v1alpha1.GlobalMetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "shared", UID: "shared-uid", Generation: 1, ResourceVersion: "1",
			Annotations: map[string]string{v1alpha1.AllocatingClusterAnnotation: allocating}},
		Spec: v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.9.0.0/29"}, Prefix: ptr.To(int32(29)), Gateway: "10.9.0.1"},
	}
	pool.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(v1alpha1.GlobalMetalVRFIPPoolKind))
	for i := 0; i+1 < len(annotations); i += 2 {
		pool.Annotations[annotations[i]] = annotations[i+1]
	}
	return pool
}

func claimNamed(ns, name string) Claim {
	return Claim{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, UID: types.UID(ns + "-" + name)}
}

// An IPAddress created by someone else (clusterctl move) is admitted before
// it exists: no claim is served its address afterwards, and a second
// IPAddress of another claim with that address is refused.
func TestAdmitKeepsMovedAddressesFromClaims(t *testing.T) {
	ctx := context.Background()
	reg := New(newMemStore(), nil, "here")
	pool := globalPool("here")
	moved := claimNamed("a", "moved")
	if err := reg.Admit(ctx, pool, moved, netip.MustParseAddr("10.9.0.2")); err != nil {
		t.Fatal(err)
	}
	ip, _, err := reg.Acquire(ctx, pool, claimNamed("a", "waiting"), netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if ip != netip.MustParseAddr("10.9.0.3") {
		t.Fatalf("a waiting claim got %s; 10.9.0.2 is the moved claim's", ip)
	}
	if err := reg.Admit(ctx, pool, claimNamed("b", "other"), ip); !errors.Is(err, ErrConflict) {
		t.Fatalf("a second IPAddress of %s was admitted: %v", ip, err)
	}
	if err := reg.Admit(ctx, pool, moved, netip.MustParseAddr("10.9.0.2")); err != nil {
		t.Fatalf("the same IPAddress admitted again (a retried move): %v", err)
	}
}

// An IPAddress made elsewhere (moved, restored, or written by a tenant) gets
// in only with an address the pool hands out, through every door: the
// webhook's Admit, on the allocating replica and on one that may not
// allocate, and Adopt, for one that got past the webhook. The gateway,
// network and broadcast addresses and one outside the pool are refused, and
// no record of them is left.
func TestNoDoorTakesInAnAddressThePoolDoesNotHandOut(t *testing.T) {
	ctx := context.Background()
	pool := globalPool("here")
	for _, bad := range []string{"10.9.0.1", "10.9.0.0", "10.9.0.7", "10.9.1.2"} {
		ip := netip.MustParseAddr(bad)
		store := newMemStore()
		leader := New(store, nil, "here")
		fenced := New(store, func() error { return ErrFenced }, "here")
		doors := map[string]func() error{
			"Admit":                 func() error { return leader.Admit(ctx, pool, claimNamed("a", "admitted"), ip) },
			"Admit, fenced replica": func() error { return fenced.Admit(ctx, pool, claimNamed("a", "fenced"), ip) },
			"Adopt":                 func() error { return leader.Adopt(ctx, pool, claimNamed("a", "adopted"), ip) },
		}
		for door, take := range doors {
			if err := take(); !errors.Is(err, ErrNotInPool) {
				t.Errorf("%s took in %s: %v", door, ip, err)
			}
		}
		if records := store.records[DomainOf(pool)]; len(records) > 0 {
			t.Errorf("records left for %s: %v", ip, records)
		}
	}
	// What the pool hands out still gets in.
	reg := New(newMemStore(), nil, "here")
	if err := reg.Adopt(ctx, pool, claimNamed("a", "restored"), netip.MustParseAddr("10.9.0.6")); err != nil {
		t.Fatalf("an IPAddress of an address the pool hands out was refused: %v", err)
	}
}

// A replica that may not allocate asks the store alone.
func TestAdmitOnAFencedReplicaAsksTheStore(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	leader := New(store, nil, "here")
	fenced := New(store, func() error { return ErrFenced }, "here")
	pool := globalPool("here")
	ip, _, err := leader.Acquire(ctx, pool, claimNamed("a", "first"), netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fenced.Admit(ctx, pool, claimNamed("a", "other"), ip); !errors.Is(err, ErrConflict) {
		t.Fatalf("the fenced replica admitted %s twice: %v", ip, err)
	}
	if err := fenced.Admit(ctx, pool, claimNamed("a", "first"), ip); err != nil {
		t.Fatalf("the fenced replica refused the holder's own IPAddress: %v", err)
	}
}

// A retired address stays out of use through the claim's release and a
// restart, and is freed only when the pool is forgotten.
func TestRetiredAddressStaysOutOfUse(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	reg := New(store, nil, "here")
	pool := globalPool("here")
	gone := claimNamed("a", "gone")
	ip, _, err := reg.Acquire(ctx, pool, gone, netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Retire(ctx, pool, gone, ip); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Release(ctx, poolref.KeyOf(pool), gone); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*Registry{"same process": reg, "after a restart": New(store, nil, "here")} {
		stats, err := r.Stats(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Used != 0 || stats.Retired != 1 {
			t.Fatalf("%s: used %d retired %d, want 0 and 1", name, stats.Used, stats.Retired)
		}
		got, _, err := r.Acquire(ctx, pool, claimNamed("b", "new-"+name), ip)
		if !errors.Is(err, ErrRequestedUnavailable) {
			t.Fatalf("%s: the retired %s was handed out again (%s, %v)", name, ip, got, err)
		}
	}
	if err := reg.Forget(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if got, _, err := New(store, nil, "here").Acquire(ctx, pool, claimNamed("b", "after"), ip); err != nil || got != ip {
		t.Fatalf("after the pool was deleted and made again, %s is not free: %s, %v", ip, got, err)
	}
}

// A pool's retired addresses stay out of use while another pool of its VRF
// exists here, which could hand them out; the domain's last pool takes
// them along when it goes.
func TestRetiredAddressesOutliveTheirPoolInTheVRF(t *testing.T) {
	ctx := context.Background()
	store := newMemStore()
	reg := New(store, nil, "here")
	global, namespaced := vrfPools()
	namespaced.Spec.Addresses = global.Spec.Addresses
	namespaced.Spec.Prefix, namespaced.Spec.Gateway = global.Spec.Prefix, global.Spec.Gateway
	for _, p := range []v1alpha1.Pool{global, namespaced} {
		store.domainOf[poolref.KeyOf(p)] = DomainOf(p)
	}
	moved := claimNamed("a", "moved")
	ip, _, err := reg.Acquire(ctx, global, moved, netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Retire(ctx, global, moved, ip); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Release(ctx, poolref.KeyOf(global), moved); err != nil {
		t.Fatal(err)
	}

	if err := reg.Forget(ctx, global); err != nil {
		t.Fatal(err)
	}
	delete(store.domainOf, poolref.KeyOf(global))
	for name, r := range map[string]*Registry{"same process": reg, "after a restart": New(store, nil, "here")} {
		if got, _, err := r.Acquire(ctx, namespaced, claimNamed("b", "new-"+strings.ReplaceAll(name, " ", "-")), ip); !errors.Is(err, ErrRequestedUnavailable) {
			t.Fatalf("%s: the other pool of the VRF handed out %s, retired by the deleted pool (%s, %v)", name, ip, got, err)
		}
	}

	if err := reg.Forget(ctx, namespaced); err != nil {
		t.Fatal(err)
	}
	delete(store.domainOf, poolref.KeyOf(namespaced))
	if got, _, err := New(store, nil, "here").Acquire(ctx, namespaced, claimNamed("b", "after"), ip); err != nil || got != ip {
		t.Fatalf("after the VRF's last pool was deleted and made again, %s is not free: %s, %v", ip, got, err)
	}
}

// The hand-over waits for the claims here, then stops allocation.
func TestHandOver(t *testing.T) {
	ctx := context.Background()
	reg := New(newMemStore(), nil, "here")
	pool := globalPool("here")
	holder := claimNamed("b", "holder")
	if _, _, err := reg.Acquire(ctx, pool, holder, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	holders, err := reg.HandOver(ctx, pool)
	if err != nil || holders["b"] != 1 {
		t.Fatalf("hand-over with a claim holding an address: %v, %v", holders, err)
	}
	if _, _, err := reg.Acquire(ctx, pool, claimNamed("b", "more"), netip.Addr{}); err != nil {
		t.Fatalf("a refused hand-over stopped allocation: %v", err)
	}
	for _, c := range []Claim{holder, claimNamed("b", "more")} {
		if _, err := reg.Release(ctx, poolref.KeyOf(pool), c); err != nil {
			t.Fatal(err)
		}
	}
	if holders, err := reg.HandOver(ctx, pool); err != nil || len(holders) != 0 {
		t.Fatalf("hand-over with no claim: %v, %v", holders, err)
	}
	if _, _, err := reg.Acquire(ctx, pool, claimNamed("b", "late"), netip.Addr{}); !errors.Is(err, ErrPoolNotReady) {
		t.Fatalf("a handed-over pool still allocates: %v", err)
	}
}

func TestAllocatesHere(t *testing.T) {
	namespaced := &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"}}
	for name, tc := range map[string]struct {
		pool       v1alpha1.Pool
		handedOver bool
		here       bool
	}{
		"namespaced pools move whole":         {pool: namespaced, here: true},
		"named here":                          {pool: globalPool("here"), here: true},
		"named elsewhere":                     {pool: globalPool("there")},
		"not named yet":                       {pool: globalPool("")},
		"handed over, in memory":              {pool: globalPool("here"), handedOver: true},
		"handed over, by its token":           {pool: globalPool("here", v1alpha1.HandoverTokenAnnotation, "here.1")},
		"the token of a copy taken elsewhere": {pool: globalPool("there", v1alpha1.HandoverTokenAnnotation, "here.1")},
	} {
		t.Run(name, func(t *testing.T) {
			err := allocatesHere(tc.pool, "here", tc.handedOver)
			if (err == nil) != tc.here {
				t.Fatalf("allocatesHere = %v, want here=%v", err, tc.here)
			}
		})
	}
}

// A claim without a UID retires the address its name's claim held, whatever
// that claim's UID was (the garbage collector stripped the IPAddress's owner
// reference to it), and nothing another claim holds.
func TestRetireByNameAlone(t *testing.T) {
	ctx := context.Background()
	reg := New(newMemStore(), nil, "here")
	pool := globalPool("here")
	gone := claimNamed("a", "gone")
	ip, _, err := reg.Acquire(ctx, pool, gone, netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	other := Claim{NamespacedName: types.NamespacedName{Namespace: "a", Name: "other"}}
	if retired, err := reg.Retire(ctx, pool, other, ip); err != nil || retired {
		t.Fatalf("another name retired %s: %v, %v", ip, retired, err)
	}
	byName := Claim{NamespacedName: gone.NamespacedName}
	for range 2 { // and again, as a retried reconcile would
		if retired, err := reg.Retire(ctx, pool, byName, ip); err != nil || !retired {
			t.Fatalf("the claim's name did not retire %s: %v, %v", ip, retired, err)
		}
	}
	if _, _, err := reg.Acquire(ctx, pool, claimNamed("a", "again"), ip); !errors.Is(err, ErrRequestedUnavailable) {
		t.Fatalf("the retired %s was handed out again: %v", ip, err)
	}
}
