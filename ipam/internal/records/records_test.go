package records_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/records"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// start runs an API server until the test ends.
func start(tb testing.TB) *testenv.Environment {
	tb.Helper()
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = env.Stop() })
	return env
}

// startStore starts an API server and returns it with a namespace of its
// own and a store keeping its records there.
func startStore(ctx context.Context, t *testing.T) (*testenv.Environment, string, *records.Store) {
	t.Helper()
	env := start(t)
	ns, err := env.NewNamespace(ctx, "records")
	if err != nil {
		t.Fatal(err)
	}
	return env, ns, records.New(env.Client, env.Client, ns, records.Writer{Identity: "test"})
}

// TestRetiredRecordsOutliveTheirPoolInTheVRF: against a real API server, a
// deleted pool's retired record stays while another pool of its VRF
// exists (it could hand the address out), and goes with the VRF's last
// pool.
func TestRetiredRecordsOutliveTheirPoolInTheVRF(t *testing.T) {
	ctx := context.Background()
	env, ns, store := startStore(ctx, t)

	var pools []*v1alpha1.MetalVRFIPPool
	for _, name := range []string{"first", "second"} {
		pool := &v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.MetalVRFIPPoolSpec{
				VRF: &v1alpha1.VRFSource{ID: "vrf-1", CredentialsRef: v1alpha1.SecretReference{Name: "metal"}},
			},
		}
		if err := env.Client.Create(ctx, pool); err != nil {
			t.Fatal(err)
		}
		pool.Status.VRF = &v1alpha1.ResolvedVRF{ID: "vrf-1", ProjectID: "project-1"}
		if err := env.Client.Status().Update(ctx, pool); err != nil {
			t.Fatal(err)
		}
		pools = append(pools, pool)
	}
	domain := registry.DomainOf(pools[0])
	if other := registry.DomainOf(pools[1]); other != domain {
		t.Fatalf("the pools are in domains %s and %s; the test needs one", domain, other)
	}

	rec := registry.Record{Address: netip.MustParseAddr("10.9.0.2"), Holder: registry.Holder{
		Pool:  poolref.KeyOf(pools[0]),
		Claim: registry.Claim{NamespacedName: types.NamespacedName{Namespace: ns, Name: "moved"}, UID: "claim-uid"},
	}}
	if err := store.Reserve(ctx, domain, rec); err != nil {
		t.Fatal(err)
	}
	if err := store.Retire(ctx, domain, rec); err != nil {
		t.Fatal(err)
	}
	retired := func() int {
		t.Helper()
		var list coordinationv1.LeaseList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.AllocationRetiredLabel: "true"}); err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	if n := retired(); n != 1 {
		t.Fatalf("%d retired records, want 1", n)
	}

	// The first pool is deleted (the API server still shows it while its
	// finalizer runs: ForgetRetired is told which pool goes).
	if err := store.ForgetRetired(ctx, domain, poolref.KeyOf(pools[0])); err != nil {
		t.Fatal(err)
	}
	if n := retired(); n != 1 {
		t.Fatalf("the retired record went with its pool while %s of the VRF exists", pools[1].Name)
	}
	if err := env.Client.Delete(ctx, pools[0], client.Preconditions{UID: ptr.To(pools[0].UID)}); err != nil {
		t.Fatal(err)
	}
	if err := store.ForgetRetired(ctx, domain, poolref.KeyOf(pools[1])); err != nil {
		t.Fatal(err)
	}
	if n := retired(); n != 0 {
		t.Fatalf("%d retired records left after the VRF's last pool went", n)
	}
}

// countingReader counts the lists of each kind it serves, and the gets.
type countingReader struct {
	client.Reader
	mu    sync.Mutex
	lists map[string]int
	gets  int
}

func (r *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.mu.Lock()
	r.lists[fmt.Sprintf("%T", list)]++
	r.mu.Unlock()
	return r.Reader.List(ctx, list, opts...)
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.mu.Lock()
	r.gets++
	r.mu.Unlock()
	return r.Reader.Get(ctx, key, obj, opts...)
}

// counts are the lists of every kind and the gets served so far.
func (r *countingReader) counts() (lists, gets int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.lists {
		lists += n
	}
	return lists, r.gets
}

// TestSeedingReadsEachKindOnce: after a failover every domain seeds at
// once; the claims, pools and IPAddresses of the cluster are read once for
// all of them, a page at a time, not once per domain.
func TestSeedingReadsEachKindOnce(t *testing.T) {
	ctx := context.Background()
	env := start(t)
	ns, err := env.NewNamespace(ctx, "records")
	if err != nil {
		t.Fatal(err)
	}
	const poolCount = 12
	var domains []string
	for i := range poolCount {
		pool := &v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pool-%d", i)},
			Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{fmt.Sprintf("10.%d.0.0/24", i)}, Prefix: ptr.To[int32](24)},
		}
		if err := env.Client.Create(ctx, pool); err != nil {
			t.Fatal(err)
		}
		address := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pool.Name},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: pool.Name},
				PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: pool.Name},
				Address:  fmt.Sprintf("10.%d.0.2", i), Prefix: ptr.To[int32](24),
			},
		}
		if err := env.Client.Create(ctx, address); err != nil {
			t.Fatal(err)
		}
		domains = append(domains, registry.DomainOf(pool))
	}
	reader := &countingReader{Reader: env.Client, lists: map[string]int{}}
	store := records.New(env.Client, reader, ns, records.Writer{Identity: "test"})
	var wg sync.WaitGroup
	errs := make([]error, len(domains))
	for i, domain := range domains {
		wg.Go(func() {
			if _, err := store.Records(ctx, domain); err != nil {
				errs[i] = err
				return
			}
			addresses, err := store.Addresses(ctx, domain)
			if err == nil && len(addresses) != 1 {
				err = fmt.Errorf("domain %s: %d IPAddresses, want 1", domain, len(addresses))
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, kind := range []string{"*v1beta2.IPAddressList", "*v1beta2.IPAddressClaimList", "*v1alpha1.MetalVRFIPPoolList", "*v1alpha1.GlobalMetalVRFIPPoolList"} {
		if n := reader.lists[kind]; n != 1 {
			t.Errorf("%d domains seeded with %d lists of %s, want 1", poolCount, n, kind)
		}
	}
}

// timingOut fails every Get as an API server that does not answer in time.
type timingOut struct{ client.Reader }

func (timingOut) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return apierrors.NewTimeoutError("no answer in time", 1)
}

// TestSeedingFailsOnAnAPIErrorNotOnABadObject: against a real API server,
// reading a claim that fails for a while fails the seeding, which is
// retried; an IPAddress whose spec.claimRef.name no claim can have is not
// read for, keeps its address, and is reported.
func TestSeedingFailsOnAnAPIErrorNotOnABadObject(t *testing.T) {
	ctx := context.Background()
	env, ns, _ := startStore(ctx, t)
	pool := &v1alpha1.MetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pool"},
		Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.8.0.0/24"}, Prefix: ptr.To[int32](24)},
	}
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	domain := registry.DomainOf(pool)
	// Neither has an owner reference: its claim is read live. They are
	// written in version v1beta1, whose schema, unlike v1beta2's, checks
	// no name's format.
	for _, a := range []struct{ name, claim, address string }{
		{"unowned", "unowned", "10.8.0.2"}, {"stray", "no/such claim", "10.8.0.3"},
	} {
		address := &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"namespace": ns, "name": a.name},
			"spec": map[string]any{
				"claimRef": map[string]any{"name": a.claim},
				"poolRef":  map[string]any{"apiGroup": v1alpha1.GroupVersion.Group, "kind": v1alpha1.MetalVRFIPPoolKind, "name": pool.Name},
				"address":  a.address, "prefix": int64(24),
			},
		}}
		address.SetGroupVersionKind(schema.GroupVersionKind{Group: ipamv1.GroupVersion.Group, Version: "v1beta1", Kind: "IPAddress"})
		if err := env.Client.Create(ctx, address); err != nil {
			t.Fatal(err)
		}
	}

	store := records.New(env.Client, timingOut{env.Client}, ns, records.Writer{Identity: "test"})
	if _, err := store.Addresses(ctx, domain); !apierrors.IsTimeout(err) {
		t.Fatalf("seeding with the claim of IPAddress unowned unread: %v, want the timeout", err)
	}

	if err := env.Client.Delete(ctx, &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unowned"}}); err != nil {
		t.Fatal(err)
	}
	store = records.New(env.Client, timingOut{env.Client}, ns, records.Writer{Identity: "test"})
	var skips []records.Skip
	store.OnSkip(func(skip records.Skip) { skips = append(skips, skip) })
	addresses, err := store.Addresses(ctx, domain)
	if err != nil {
		t.Fatalf("seeding failed for IPAddress stray: %v", err)
	}
	if len(addresses) != 1 || addresses[0].Address != netip.MustParseAddr("10.8.0.3") ||
		addresses[0].Holder.Claim.Name != "stray" || !strings.HasPrefix(string(addresses[0].Holder.Claim.UID), "ipaddress-") {
		t.Errorf("addresses in use %+v, want 10.8.0.3 held for IPAddress stray itself", addresses)
	}
	if len(skips) != 1 || skips[0].Object.GetName() != "stray" || skips[0].Reason != records.UnidentifiedClaimReason {
		t.Errorf("skips %+v, want IPAddress stray's, for %s", skips, records.UnidentifiedClaimReason)
	}
}

// TestAnAdoptedPoolSeedsFromAReadAfterItServes: against a real API server,
// the companion of an adopted in-cluster pool does not seed from a
// snapshot read before it, for another domain: the IPAddresses the
// in-cluster provider made meanwhile, without records, would be missing,
// and their addresses handed out again. Another new pool does (its
// IPAddresses have records).
func TestAnAdoptedPoolSeedsFromAReadAfterItServes(t *testing.T) {
	ctx := context.Background()
	env, ns, store := startStore(ctx, t)
	newPool := func(name, addresses string) v1alpha1.Pool {
		pool := &v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{addresses}, Prefix: ptr.To[int32](24)},
		}
		if err := env.Client.Create(ctx, pool); err != nil {
			t.Fatal(err)
		}
		return pool
	}
	newAddress := func(name string, ref ipamv1.IPPoolReference, ip string) {
		address := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: name}, PoolRef: ref, Address: ip, Prefix: ptr.To[int32](24),
			},
		}
		if err := env.Client.Create(ctx, address); err != nil {
			t.Fatal(err)
		}
	}
	group := v1alpha1.GroupVersion.Group
	first := newPool("first", "10.1.0.0/24")
	if _, err := store.Records(ctx, registry.DomainOf(first)); err != nil {
		t.Fatal(err)
	}
	// Since that snapshot: the in-cluster provider's IPAddress, then the
	// companion; and a pool of ours with its IPAddress.
	newAddress("node-0", ipamv1.IPPoolReference{APIGroup: group, Kind: v1alpha1.InClusterIPPoolKind, Name: "nodes"}, "10.2.0.10")
	companion := newPool(v1alpha1.AdoptedPoolPrefix+"nodes", "10.2.0.0/24")
	other := newPool("other", "10.3.0.0/24")
	newAddress("other-0", ipamv1.IPPoolReference{APIGroup: group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: "other"}, "10.3.0.10")

	addresses, err := store.Addresses(ctx, registry.DomainOf(companion))
	if err != nil {
		t.Fatal(err)
	}
	if len(addresses) != 1 || addresses[0].Address != netip.MustParseAddr("10.2.0.10") {
		t.Errorf("the companion seeds from %v, want the in-cluster provider's 10.2.0.10", addresses)
	}
	pool, err := store.PoolAddresses(ctx, poolref.KeyOf(companion))
	if err != nil {
		t.Fatal(err)
	}
	if len(pool) != 1 {
		t.Errorf("the companion's own IPAddresses: %v, want 10.2.0.10", pool)
	}
	// The read the companion made serves the others while it is fresh.
	if addresses, err := store.Addresses(ctx, registry.DomainOf(other)); err != nil || len(addresses) != 1 {
		t.Errorf("pool other seeds from %v, %v; want its IPAddress", addresses, err)
	}
}
