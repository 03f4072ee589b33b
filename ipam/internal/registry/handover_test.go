package registry

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// stalledStore holds the first Confirm (of a record only matches, when not
// nil) until released: an allocation in flight, its address taken and its
// record not written yet.
type stalledStore struct {
	*memStore
	once             sync.Once
	entered, release chan struct{}
	only             func(Record) bool
}

func (s *stalledStore) Confirm(ctx context.Context, domain string, r Record) error {
	if s.only != nil && !s.only(r) {
		return s.memStore.Confirm(ctx, domain, r)
	}
	s.once.Do(func() {
		close(s.entered)
		<-s.release
	})
	return s.memStore.Confirm(ctx, domain, r)
}

// A hand-over counts an address being recorded for a claim: otherwise the
// claim is served it after the pool was handed over, and the taking
// cluster may hand it out too.
func TestHandOverWaitsForAllocationsInFlight(t *testing.T) {
	ctx := context.Background()
	store := &stalledStore{memStore: newMemStore(), entered: make(chan struct{}), release: make(chan struct{})}
	reg := New(store, nil, "here")
	pool := globalPool("here")
	served := make(chan error, 1)
	go func() {
		_, _, err := reg.Acquire(ctx, pool, claimNamed("b", "in-flight"), netip.Addr{})
		served <- err
	}()
	<-store.entered
	holders, err := reg.HandOver(ctx, pool)
	close(store.release)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if err != nil || holders["b"] != 1 {
		t.Fatalf("handed over while an address was being recorded for claim b/in-flight, which was then served it: holders %v, %v", holders, err)
	}
}

// vrfPools are a GlobalMetalVRFIPPool and a MetalVRFIPPool of one VRF: one
// allocation domain.
func vrfPools() (*v1alpha1.GlobalMetalVRFIPPool, *v1alpha1.MetalVRFIPPool) {
	global := globalPool("here")
	global.Spec.VRF = &v1alpha1.VRFSource{ID: "vrf-1", CredentialsRef: v1alpha1.SecretReference{Name: "metal"}}
	global.Status.VRF = &v1alpha1.ResolvedVRF{ID: "vrf-1", ProjectID: "project-1"}
	namespaced := &v1alpha1.MetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "local", UID: "local-uid", Generation: 1, ResourceVersion: "1"},
		Spec:       *global.Spec.DeepCopy(),
		Status:     v1alpha1.MetalVRFIPPoolStatus{VRF: global.Status.VRF.DeepCopy()},
	}
	namespaced.Spec.Addresses, namespaced.Spec.Prefix, namespaced.Spec.Gateway = []string{"10.9.0.8/29"}, ptr.To(int32(29)), "10.9.0.9"
	namespaced.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(v1alpha1.MetalVRFIPPoolKind))
	return global, namespaced
}

// A hand-over counts the addresses of every pool of the VRF, and stops
// them all: the taking cluster hands out the VRF's addresses.
func TestHandOverCoversTheWholeVRF(t *testing.T) {
	ctx := context.Background()
	reg := New(newMemStore(), nil, "here")
	global, namespaced := vrfPools()
	if DomainOf(global) != DomainOf(namespaced) {
		t.Fatalf("the pools are in domains %s and %s; the test needs one", DomainOf(global), DomainOf(namespaced))
	}
	holder := claimNamed("a", "holder")
	if _, _, err := reg.Acquire(ctx, namespaced, holder, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	holders, err := reg.HandOver(ctx, global)
	if err != nil || holders["a"] != 1 {
		t.Fatalf("handed over while a claim of another pool of the VRF holds an address: holders %v, %v", holders, err)
	}
	if _, err := reg.Release(ctx, poolref.KeyOf(namespaced), holder); err != nil {
		t.Fatal(err)
	}
	if holders, err := reg.HandOver(ctx, global); err != nil || len(holders) != 0 {
		t.Fatalf("hand-over with no claim: %v, %v", holders, err)
	}
	if ip, _, err := reg.Acquire(ctx, namespaced, claimNamed("a", "late"), netip.Addr{}); err == nil {
		t.Fatalf("a pool of the handed-over VRF still hands out addresses here: %s", ip)
	}
}

// countingStore counts the reads that seed a domain or a pool.
type countingStore struct {
	*memStore
	seeds atomic.Int32
}

func (s *countingStore) Records(ctx context.Context, domain string) ([]Record, error) {
	s.seeds.Add(1)
	return s.memStore.Records(ctx, domain)
}

func (s *countingStore) PoolAddresses(ctx context.Context, pool poolref.Key) ([]Record, error) {
	s.seeds.Add(1)
	return s.memStore.PoolAddresses(ctx, pool)
}

// Admit (the IPAddress webhook) never seeds a domain: after a failover
// that reads every record and IPAddress of the domain, longer than the API
// server waits for the webhook. It records in the store alone, which the
// seeding then reads: no claim is served the admitted address.
func TestAdmitDoesNotSeed(t *testing.T) {
	ctx := context.Background()
	store := &countingStore{memStore: newMemStore()}
	reg := New(store, nil, "here")
	pool := globalPool("here")
	moved := claimNamed("a", "moved")
	if err := reg.Admit(ctx, pool, moved, netip.MustParseAddr("10.9.0.2")); err != nil {
		t.Fatal(err)
	}
	if n := store.seeds.Load(); n != 0 {
		t.Fatalf("Admit seeded the domain inline: %d seeding reads", n)
	}
	ip, _, err := reg.Acquire(ctx, pool, claimNamed("a", "waiting"), netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if ip == netip.MustParseAddr("10.9.0.2") {
		t.Fatalf("a claim was served %s, which Admit recorded for %s", ip, moved)
	}
}
