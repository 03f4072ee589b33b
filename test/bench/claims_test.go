package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	inclusterv1 "sigs.k8s.io/cluster-api-ipam-provider-in-cluster/api/v1alpha2"
	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/pkg/ipamutil"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

const (
	// bindClaims claims are created at once by creators goroutines.
	bindClaims = 1000
	creators   = 16
	// In a pool that holds scaleInUse addresses, and in an empty one for
	// comparison, scaleClaims claims are created one at a time, then
	// burstClaims at once.
	scaleClaims = 100
	burstClaims = 200
	scaleInUse  = 50000

	// Every pool, of either provider, is this /16 with this gateway; the
	// lowest address either provider hands out is firstFree.
	poolCIDR   = "10.10.0.0/16"
	poolPrefix = 16
	gateway    = "10.10.0.1"
	firstFree  = "10.10.0.2"
	poolName   = "pool"

	// scenarioTimeout bounds one scenario; it is a guard against a stuck
	// provider (or a machine too busy to measure on), not a speed target.
	scenarioTimeout = 45 * time.Minute
)

// inCluster names the reference provider, ourName this one.
const (
	inCluster = "in-cluster"
	ourName   = "metal-vrf"
)

// provider is one IPAM provider as the benchmarks see it: how to start its
// manager, the pool kind its claims refer to, and how to create that pool
// and read its count of addresses in use.
type provider struct {
	name      string
	start     func(env *testenv.Environment) (stop func(), err error)
	group     string
	kind      string
	newPool   func() client.Object
	usedCount func(pool client.Object) (used int64, reported bool)
	// deletesOrphans: the provider deletes an IPAddress of its pool whose
	// claim does not exist (ours, for clusterctl move), so the addresses a
	// scenario holds in use need claims of their own.
	deletesOrphans bool
}

// providers are measured in this order: the reference first, then the
// floor (floor_test.go), then ours, so that each can be compared with the
// floor.
var providers = []provider{
	{
		name: inCluster, start: startInCluster, group: inclusterv1.GroupVersion.Group, kind: "InClusterIPPool",
		newPool: func() client.Object {
			return &inclusterv1.InClusterIPPool{Spec: inclusterv1.InClusterIPPoolSpec{
				Addresses: []string{poolCIDR}, Prefix: poolPrefix, Gateway: gateway,
			}}
		},
		usedCount: func(pool client.Object) (int64, bool) {
			s := pool.(*inclusterv1.InClusterIPPool).Status.Addresses
			if s == nil {
				return 0, false
			}
			return int64(s.Used), true
		},
	},
	floor,
	{
		name: ourName, start: startOurs, group: v1alpha1.GroupVersion.Group, kind: v1alpha1.MetalVRFIPPoolKind,
		newPool: func() client.Object {
			return &v1alpha1.MetalVRFIPPool{Spec: v1alpha1.MetalVRFIPPoolSpec{
				Addresses: []string{poolCIDR}, Prefix: ptr.To[int32](poolPrefix), Gateway: gateway,
			}}
		},
		usedCount: func(pool client.Object) (int64, bool) {
			s := pool.(*v1alpha1.MetalVRFIPPool).Status.IPAddresses
			if s == nil {
				return 0, false
			}
			return s.Used, true
		},
		deletesOrphans: true,
	},
}

func (p provider) poolRef() ipamv1.IPPoolReference {
	return ipamv1.IPPoolReference{APIGroup: p.group, Kind: p.kind, Name: poolName}
}

// BenchmarkBindClaims measures throughput: bindClaims claims created at once,
// by creators goroutines, on an empty pool, for each provider in turn. It
// reports each provider's claims/s,
// p50 and p99, the CPU time the whole environment spent per claim, the write
// requests per claim, and ours as a multiple of the in-cluster provider's
// claims/s (x-in-cluster), and each provider's claims/s as a multiple of the
// floor's (<provider>-x-floor), which does only the contract's writes.
func BenchmarkBindClaims(b *testing.B) {
	setup(b)
	rates := make(map[string]float64, len(providers))
	for _, p := range providers {
		r := measure(b, p, wave{name: "claim", n: bindClaims, creators: creators})
		rates[p.name] = r.rate()
		b.ReportMetric(r.rate(), p.name+"-claims/s")
		b.ReportMetric(float64(r.percentile(50))/float64(time.Millisecond), p.name+"-p50-ms")
		b.ReportMetric(float64(r.percentile(99))/float64(time.Millisecond), p.name+"-p99-ms")
		r.reportCPU(b, p.name, "claim")
		b.ReportMetric(r.writesPerClaim(), p.name+"-writes/claim")
		b.ReportMetric(r.readsPerClaim(), p.name+"-reads/claim")
	}
	b.ReportMetric(rates[ourName]/rates[inCluster], "x-in-cluster")
	b.ReportMetric(rates[ourName]/rates[floorName], ourName+"-x-floor")
	b.ReportMetric(rates[inCluster]/rates[floorName], inCluster+"-x-floor")
}

// scaleWaves are the claims BenchmarkClaimLatencyAtScale binds in each pool:
// one at a time, so a claim never queues behind another, then a burst.
var scaleWaves = []wave{
	{name: "one", n: scaleClaims, creators: 1, oneAtATime: true},
	{name: "burst", n: burstClaims, creators: creators},
}

// BenchmarkClaimLatencyAtScale measures claim latency in a pool holding
// scaleInUse addresses against an empty pool beside it, on the same API
// server and manager, for each wave of scaleWaves: the waves alternate
// between the two pools, so both see the same machine (its speed drifts
// within minutes). Each wave reports its p50 and p99 in both pools and the
// full pool's p50 as a multiple of the empty one's (x-empty-p50). Our
// manager runs in this process: its resident memory after the waves (rss-MB)
// and its live heap (live-heap-MB) are the process's, which also holds the
// benchmark's client and its watch of one pool's claims.
func BenchmarkClaimLatencyAtScale(b *testing.B) {
	setup(b)
	for _, p := range providers {
		if p.name == floorName {
			continue // it hands out from a counter: a pool in use would make it hand out twice
		}
		b.Run("provider="+p.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(b.Context(), scenarioTimeout)
			defer cancel()
			b.StopTimer()
			for range b.N {
				empty, full, mem, err := measureScale(ctx, b, p)
				if err != nil {
					b.Fatalf("%s: %v (manager logs are in %s)", p.name, err, logDir)
				}
				for i, w := range scaleWaves {
					b.ReportMetric(float64(empty[i].percentile(50))/float64(time.Millisecond), w.name+"-empty-p50-ms")
					b.ReportMetric(float64(full[i].percentile(50))/float64(time.Millisecond), w.name+"-full-p50-ms")
					b.ReportMetric(float64(full[i].percentile(99))/float64(time.Millisecond), w.name+"-full-p99-ms")
					b.ReportMetric(float64(full[i].percentile(50))/float64(empty[i].percentile(50)), w.name+"-x-empty-p50")
				}
				if p.name == ourName {
					b.ReportMetric(mem.rss, "rss-MB")
					b.ReportMetric(mem.liveHeap, "live-heap-MB")
				}
			}
			b.StartTimer()
		})
	}
}

// measureScale starts an environment running only p's manager with an empty
// pool and one holding scaleInUse addresses, binds each wave of scaleWaves
// in the empty pool then in the full one, verifies both, and reads this
// process's memory while the manager still runs.
func measureScale(ctx context.Context, b *testing.B, p provider) (empty, full []result, mem memory, err error) {
	env, err := startAlone(p)
	if err != nil {
		return nil, nil, mem, err
	}
	defer env.stop()
	fullPool, err := newScenario(ctx, env, p, scaleInUse)
	if err != nil {
		return nil, nil, mem, err
	}
	emptyPool, err := newScenario(ctx, env, p, 0)
	if err != nil {
		return nil, nil, mem, err
	}
	empty, full = make([]result, len(scaleWaves)), make([]result, len(scaleWaves))
	claims := 0
	for i, w := range scaleWaves {
		if empty[i], err = emptyPool.measureWave(ctx, b, w); err != nil {
			return nil, nil, mem, err
		}
		if full[i], err = fullPool.measureWave(ctx, b, w); err != nil {
			return nil, nil, mem, err
		}
		claims += w.n
	}
	err = errors.Join(emptyPool.verify(ctx, claims, 0), fullPool.verify(ctx, claims, scaleInUse))
	return empty, full, readMemory(), err
}

// wave is a set of claims named name-NNNNN, created by creators goroutines;
// with oneAtATime each creator waits until its claim is bound before
// creating the next.
type wave struct {
	name       string
	n          int
	creators   int
	oneAtATime bool
}

// measure binds the wave's claims b.N times, each time on a fresh
// environment running only p's manager, in an empty pool of p (see scenario.measureWave). Only the
// claims are timed; every run is verified.
func measure(b *testing.B, p provider, w wave) result {
	ctx, cancel := context.WithTimeout(b.Context(), scenarioTimeout)
	defer cancel()
	var all result
	b.StopTimer()
	defer b.StartTimer()
	for range b.N {
		r, err := measureOnce(ctx, b, p, w)
		if err != nil {
			b.Fatalf("%s: %v (manager logs are in %s)", p.name, err, logDir)
		}
		all.add(r)
	}
	return all
}

func measureOnce(ctx context.Context, b *testing.B, p provider, w wave) (result, error) {
	env, err := startAlone(p)
	if err != nil {
		return result{}, err
	}
	defer env.stop()
	s, err := newScenario(ctx, env, p, 0)
	if err != nil {
		return result{}, err
	}
	r, err := s.measureWave(ctx, b, w)
	if err != nil {
		return result{}, err
	}
	return r, s.verify(ctx, w.n, 0)
}

// measureWave binds the wave's claims once the environment is idle, and
// counts the CPU time and the API requests they cost.
func (s *scenario) measureWave(ctx context.Context, b *testing.B, w wave) (result, error) {
	return s.measure(ctx, b, func() (result, error) { return s.bind(ctx, w) })
}

// measure runs step once the environment is idle, timed, and adds to its
// result the CPU time and the API requests it cost.
func (s *scenario) measure(ctx context.Context, b *testing.B, step func() (result, error)) (result, error) {
	if err := settle(ctx); err != nil {
		return result{}, err
	}
	before, err := apiRequests(ctx, s.env.cfg)
	if err != nil {
		return result{}, err
	}
	cpuBefore := processCPU()
	b.StartTimer()
	r, err := step()
	b.StopTimer()
	if err != nil {
		return result{}, err
	}
	r.addCPU(cpuBefore, processCPU())
	// The writes that follow the step (a pool's status, say) are its own
	// too: count them once the environment is idle again.
	if err := settle(ctx); err != nil {
		return result{}, err
	}
	after, err := apiRequests(ctx, s.env.cfg)
	if err != nil {
		return result{}, err
	}
	r.writes, r.reads = after.writes-before.writes, after.reads-before.reads
	return r, nil
}

// scenario is one namespace with one pool of one provider.
type scenario struct {
	env *environment
	p   provider
	ns  string
}

var namespaces atomic.Int32

// newScenario creates a namespace, inUse IPAddresses of the pool, then the
// pool, and waits until the provider reports inUse addresses in use.
//
// The addresses in use are IPAddress objects of the lowest inUse addresses,
// as inUse claims would have got them, created without the provider
// serving the pool, the way a provider finds them after a restart: our
// provider reads a pool's IPAddresses once, when it first serves the pool,
// and from then on expects every IPAddress of the pool to come from itself.
//
// For the in-cluster provider they are created before their pool and
// without claims: it reads no other claim when it serves one, and having
// it reconcile the held claims first (O(addresses) each) would take
// minutes before anything is measured. Ours deletes an IPAddress whose
// claim does not exist, so for ours each address has its bound claim; the
// pool exists first, paused, so that no claim is served before its
// IPAddress exists, and serves them once resumed.
func newScenario(ctx context.Context, env *environment, p provider, inUse int) (*scenario, error) {
	k8s := env.k8s
	s := &scenario{env: env, p: p, ns: fmt.Sprintf("%s-%d-in-use-%d", p.name, namespaces.Add(1), inUse)}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}); err != nil {
		return s, err
	}
	pool := p.newPool()
	pool.SetNamespace(s.ns)
	pool.SetName(poolName)
	if p.deletesOrphans {
		pool.SetAnnotations(map[string]string{clusterv1.PausedAnnotation: "true"})
		if err := k8s.Create(ctx, pool); err != nil {
			return s, err
		}
	}
	err := forEach(ctx, inUse, creators, func(i int) error {
		name := fmt.Sprintf("held-%05d", i)
		address := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: name},
				PoolRef:  p.poolRef(),
				Address:  poolAddress(i).String(), Prefix: ptr.To[int32](poolPrefix), Gateway: gateway,
			},
		}
		if p.deletesOrphans {
			if err := createHolder(ctx, k8s, pool, address); err != nil {
				return err
			}
		}
		return k8s.Create(ctx, address)
	})
	if err != nil {
		return s, fmt.Errorf("creating the addresses in use: %w", err)
	}
	if p.deletesOrphans {
		resume := client.MergeFrom(pool.DeepCopyObject().(client.Object))
		pool.SetAnnotations(nil)
		err = k8s.Patch(ctx, pool, resume)
	} else {
		err = k8s.Create(ctx, pool)
	}
	if err != nil {
		return s, err
	}
	return s, s.awaitInUse(ctx, pool, inUse)
}

// createHolder creates the bound claim that holds address, and makes
// address its claim's and its pool's as a provider does.
func createHolder(ctx context.Context, k8s client.Client, pool client.Object, address *ipamv1.IPAddress) error {
	claim := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: address.Namespace, Name: address.Spec.ClaimRef.Name, Finalizers: []string{ipamutil.ReleaseAddressFinalizer}},
		Spec:       ipamv1.IPAddressClaimSpec{PoolRef: address.Spec.PoolRef},
	}
	if err := k8s.Create(ctx, claim); err != nil {
		return err
	}
	if err := controllerutil.SetControllerReference(claim, address, scheme); err != nil {
		return err
	}
	notController := func(ref *metav1.OwnerReference) { ref.Controller = ptr.To(false) }
	if err := controllerutil.SetOwnerReference(pool, address, scheme, notController, controllerutil.WithBlockOwnerDeletion(true)); err != nil {
		return err
	}
	controllerutil.AddFinalizer(address, ipamutil.ProtectAddressFinalizer)
	return nil
}

// awaitInUse waits until the pool's status counts inUse addresses in use
// and, for a provider that holds them by claims, every claim is bound.
func (s *scenario) awaitInUse(ctx context.Context, pool client.Object, inUse int) error {
	k8s := s.env.k8s
	for {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return err
		}
		used, ok := s.p.usedCount(pool)
		counted := ok && used == int64(inUse)
		bound, poll := 0, time.Second
		if counted && s.p.deletesOrphans {
			// A list of every claim is heavy: it waits longer between them.
			var err error
			if bound, err = s.boundClaims(ctx); err != nil {
				return err
			}
			poll = 5 * time.Second
		}
		if counted && (!s.p.deletesOrphans || bound == inUse) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the pool reports %d addresses in use and %d claims are bound, want %d: %w", used, bound, inUse, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// boundClaims counts the claims of the scenario's namespace that point at
// an IPAddress.
func (s *scenario) boundClaims(ctx context.Context) (int, error) {
	var claims ipamv1.IPAddressClaimList
	if err := s.env.k8s.List(ctx, &claims, client.InNamespace(s.ns)); err != nil {
		return 0, err
	}
	bound := 0
	for _, c := range claims.Items {
		if c.Status.AddressRef.Name != "" {
			bound++
		}
	}
	return bound, nil
}

// poolAddress is the pool's i-th address from firstFree on.
func poolAddress(i int) netip.Addr {
	first := netip.MustParseAddr(firstFree).As4()
	return netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, binary.BigEndian.Uint32(first[:])+uint32(i))))
}

// bind creates the wave's claims on the pool and returns once all are
// bound. A claim's latency runs from just before its create request to the moment
// the watch sees its status.addressRef set.
func (s *scenario) bind(ctx context.Context, w wave) (result, error) {
	n := w.n
	index := make(map[string]int, n)
	created, bound := make([]time.Time, n), make([]time.Time, n)
	done := make([]chan struct{}, n)
	for i := range n {
		index[fmt.Sprintf("%s-%05d", w.name, i)] = i
		done[i] = make(chan struct{})
	}
	// bound[i] is written once by the watch, then done[i] is closed.
	stop, err := s.watchBound(ctx, func(name string, at time.Time) {
		if i, ok := index[name]; ok && bound[i].IsZero() {
			bound[i] = at
			close(done[i])
		}
	})
	if err != nil {
		return result{}, err
	}
	defer stop()

	waitBound := func(i int) error {
		select {
		case <-done[i]:
			return nil
		case <-ctx.Done():
			left := 0
			for j := range done {
				select {
				case <-done[j]:
				default:
					left++
				}
			}
			return fmt.Errorf("%d of %d claims still unbound: %w", left, n, ctx.Err())
		}
	}
	err = forEach(ctx, n, w.creators, func(i int) error {
		claim := &ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: fmt.Sprintf("%s-%05d", w.name, i)},
			Spec:       ipamv1.IPAddressClaimSpec{PoolRef: s.p.poolRef()},
		}
		created[i] = time.Now()
		if err := s.env.k8s.Create(ctx, claim); err != nil {
			return err
		}
		if w.oneAtATime {
			return waitBound(i)
		}
		return nil
	})
	if err != nil {
		return result{}, err
	}
	for i := range n {
		if err := waitBound(i); err != nil {
			return result{}, err
		}
	}

	r := result{latencies: make([]time.Duration, n)}
	for i := range n {
		r.latencies[i] = bound[i].Sub(created[i])
	}
	r.span = slices.MaxFunc(bound, time.Time.Compare).Sub(slices.MinFunc(created, time.Time.Compare))
	return r, nil
}

// watchBound calls onBound, from one goroutine, with the name of every claim
// of the namespace that a watch shows bound, and when it saw it; possibly
// more than once per claim.
func (s *scenario) watchBound(ctx context.Context, onBound func(name string, at time.Time)) (stop func(), err error) {
	seen := func(obj any) {
		if claim, ok := obj.(*ipamv1.IPAddressClaim); ok && claim.Status.AddressRef.Name != "" {
			onBound(claim.Name, time.Now())
		}
	}
	return s.watch(ctx, map[client.Object]toolscache.ResourceEventHandler{
		&ipamv1.IPAddressClaim{}: toolscache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) }},
	})
}

// watch watches the kinds of handlers' keys in the scenario's namespace,
// each with its handler, until stop is called. It returns once the watches
// have synced.
func (s *scenario) watch(ctx context.Context, handlers map[client.Object]toolscache.ResourceEventHandler) (stop func(), err error) {
	objects, err := cache.New(s.env.cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{s.ns: {}}})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	for obj, handler := range handlers {
		informer, err := objects.GetInformer(ctx, obj)
		if err != nil {
			cancel()
			return nil, err
		}
		if _, err := informer.AddEventHandler(handler); err != nil {
			cancel()
			return nil, err
		}
	}
	go func() { _ = objects.Start(ctx) }()
	if !objects.WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("the watches did not sync: %w", ctx.Err())
	}
	return cancel, nil
}

// verify checks the outcome: claims claims each bound to an IPAddress of its
// own, held more addresses in use, no address twice, all inside the pool and
// none the gateway.
func (s *scenario) verify(ctx context.Context, claims, held int) error {
	k8s := s.env.k8s
	var claimList ipamv1.IPAddressClaimList
	if err := k8s.List(ctx, &claimList, client.InNamespace(s.ns)); err != nil {
		return err
	}
	var addressList ipamv1.IPAddressList
	if err := k8s.List(ctx, &addressList, client.InNamespace(s.ns)); err != nil {
		return err
	}
	wantClaims := claims
	if s.p.deletesOrphans {
		wantClaims += held
	}
	if len(claimList.Items) != wantClaims || len(addressList.Items) != claims+held {
		return fmt.Errorf("found %d claims and %d IPAddresses, want %d and %d",
			len(claimList.Items), len(addressList.Items), wantClaims, claims+held)
	}

	subnet, gw := netip.MustParsePrefix(poolCIDR), netip.MustParseAddr(gateway)
	claimOf := make(map[string]string, len(addressList.Items)) // IPAddress name -> its claim
	holder := make(map[netip.Addr]string, len(addressList.Items))
	for _, a := range addressList.Items {
		ip, err := netip.ParseAddr(a.Spec.Address)
		if err != nil || !subnet.Contains(ip) || ip == gw {
			return fmt.Errorf("IPAddress %s has address %q, outside the pool or its gateway", a.Name, a.Spec.Address)
		}
		if other, dup := holder[ip]; dup {
			return fmt.Errorf("address %s is held by both IPAddress %s and %s", ip, other, a.Name)
		}
		holder[ip] = a.Name
		claimOf[a.Name] = a.Spec.ClaimRef.Name
	}
	for _, c := range claimList.Items {
		if ref := c.Status.AddressRef.Name; ref == "" || claimOf[ref] != c.Name {
			return fmt.Errorf("claim %s is bound to IPAddress %q, which is not its own", c.Name, ref)
		}
	}
	return nil
}

// settle waits until the environment is idle: this process (the benchmark's
// client and our manager) and its children (kube-apiserver, etcd, the
// in-cluster manager) together using less than idleShare of one core over a
// second. Without it a scenario would pay for work left over by the one
// before: the in-cluster provider, for one, keeps reconciling claims (and
// listing the pool's addresses) after they are bound. Other jobs on the
// machine do not count. Where /proc is missing it does not wait.
func settle(ctx context.Context) error {
	const idleShare, window, limit = 0.1, time.Second, 3 * time.Minute
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	prev, ok := envCPU()
	for ok {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the environment was still busy after %v: %w", limit, ctx.Err())
		case <-time.After(window):
		}
		var cur time.Duration
		if cur, ok = envCPU(); ok && float64(cur-prev) < idleShare*float64(window) {
			return nil
		}
		prev = cur
	}
	return nil
}

// envCPU returns the CPU time used so far by this process and its children,
// from /proc; false if /proc cannot be read.
func envCPU() (time.Duration, bool) {
	var total time.Duration
	for _, t := range processCPU() {
		total += t
	}
	return total, total > 0
}

// processCPU returns the CPU time used so far by this process and each of
// its children, by name: "kube-apiserver", "etcd", the in-cluster
// provider's manager, and selfProcess for this one (the benchmark's client
// and, for ours and the floor, the manager). Empty if /proc cannot be read.
func processCPU() map[string]time.Duration {
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	times := map[string]time.Duration{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) " then state, ppid, ... utime and stime at 11 and 12, in clock ticks.
		open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		f := strings.Fields(string(stat[end+1:]))
		if open < 0 || len(f) < 13 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); pid != self && ppid != self {
			continue
		}
		name := string(stat[open+1 : end])
		if pid == self {
			name = selfProcess
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		times[name] += time.Duration(utime+stime) * time.Second / clockTicks
	}
	return times
}

// selfProcess names this process in processCPU.
const selfProcess = "bench"

// memory is this process's memory, in MiB: resident (VmRSS), and what its
// heap holds after a collection, which leaves out the garbage not collected
// yet and the memory the runtime has not given back to the system.
type memory struct{ rss, liveHeap float64 }

func readMemory() memory {
	rss, _ := residentMB()
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	return memory{rss: rss, liveHeap: float64(sample[0].Value.Uint64()) / (1 << 20)}
}

// residentMB is this process's resident memory (VmRSS), in MiB.
func residentMB() (float64, bool) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err == nil
		}
	}
	return 0, false
}

// clockTicks is USER_HZ, the unit of CPU times in /proc: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// result is the latencies of a set of claims and the time from the first
// create request to the last claim bound.
type result struct {
	latencies []time.Duration
	span      time.Duration
	// cpu is the CPU time the whole environment (API server, etcd, the
	// manager and the benchmark's client) used meanwhile. Unlike the rate it
	// hardly depends on what else the machine is doing. cpuBy splits it by
	// process (see processCPU).
	cpu   time.Duration
	cpuBy map[string]time.Duration
	// writes is the number of write requests (create, update, patch,
	// delete) the API server served meanwhile, from every client.
	writes float64
	// reads is the number of get and list requests it served meanwhile.
	reads float64
}

// addCPU adds the CPU time used between two readings of processCPU.
func (r *result) addCPU(before, after map[string]time.Duration) {
	if r.cpuBy == nil {
		r.cpuBy = map[string]time.Duration{}
	}
	for name, t := range after {
		r.cpuBy[name] += t - before[name]
		r.cpu += t - before[name]
	}
}

// add adds another measurement of the same provider.
func (r *result) add(o result) {
	r.latencies = append(r.latencies, o.latencies...)
	r.span += o.span
	r.writes += o.writes
	r.reads += o.reads
	r.cpu += o.cpu
	for name, t := range o.cpuBy {
		if r.cpuBy == nil {
			r.cpuBy = map[string]time.Duration{}
		}
		r.cpuBy[name] += t
	}
}

// reportCPU reports the CPU time per claim (or release: unit) of the whole
// environment and of each of its processes.
func (r result) reportCPU(b *testing.B, provider, unit string) {
	b.ReportMetric(r.cpuPerClaim(), provider+"-cpu-ms/"+unit)
	for name, t := range r.cpuBy {
		b.ReportMetric(float64(t)/float64(time.Millisecond)/float64(len(r.latencies)), provider+"-"+name+"-cpu-ms/"+unit)
	}
}

func (r result) rate() float64 { return float64(len(r.latencies)) / r.span.Seconds() }

func (r result) writesPerClaim() float64 { return r.writes / float64(len(r.latencies)) }

func (r result) readsPerClaim() float64 { return r.reads / float64(len(r.latencies)) }

// cpuPerClaim is the environment's CPU time per claim, in milliseconds.
func (r result) cpuPerClaim() float64 {
	return float64(r.cpu) / float64(time.Millisecond) / float64(len(r.latencies))
}

// percentile returns the nearest-rank q-th percentile of the latencies.
func (r result) percentile(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(r.latencies))
	rank := int(math.Ceil(q/100*float64(len(sorted)))) - 1
	return sorted[max(rank, 0)]
}

// forEach calls fn(0) to fn(n-1) from workers goroutines and returns the
// first error; after an error no further call starts.
func forEach(ctx context.Context, n, workers int, fn func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// writeVerbs and readVerbs are the verbs of apiserver_request_total that
// change objects, and that read them (a watch is neither).
var (
	writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}
	readVerbs  = map[string]bool{"GET": true, "LIST": true}
)

// requests counts the requests the API server has served.
type requests struct{ writes, reads float64 }

// apiRequests returns how many write and read requests the API server has
// served so far, whatever their outcome, from its apiserver_request_total
// counter.
func apiRequests(ctx context.Context, cfg *rest.Config) (requests, error) {
	families, err := testenv.APIServerMetrics(ctx, cfg)
	if err != nil {
		return requests{}, err
	}
	var n requests
	for _, sample := range families["apiserver_request_total"].GetMetric() {
		for _, label := range sample.GetLabel() {
			if label.GetName() != "verb" {
				continue
			}
			switch v := sample.GetCounter().GetValue(); {
			case writeVerbs[label.GetValue()]:
				n.writes += v
			case readVerbs[label.GetValue()]:
				n.reads += v
			}
		}
	}
	return n, nil
}
