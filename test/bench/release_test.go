package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// releaseClaims claims are bound, then deleted at once by creators goroutines.
const releaseClaims = 1000

// BenchmarkReleaseClaims measures release: releaseClaims claims bound on an
// empty pool, then deleted at once by creators goroutines, for each provider
// in turn, in the default install. A claim is released once both it and its
// IPAddress are gone. It reports each provider's releases/s
// (releaseClaims / (last released - first delete request)), p50/p99 from a
// claim's delete request to its release, the CPU time of the environment
// and the write requests per release, and each provider's releases/s as a
// multiple of the floor's (<provider>-x-floor). With -count=N the providers
// alternate N times.
func BenchmarkReleaseClaims(b *testing.B) {
	setup(b)
	ctx, cancel := context.WithTimeout(b.Context(), scenarioTimeout)
	defer cancel()
	b.StopTimer()
	defer b.StartTimer()
	rates := make(map[string]float64, len(providers))
	for _, p := range providers {
		var all result
		for range b.N {
			r, err := measureRelease(ctx, b, p)
			if err != nil {
				b.Fatalf("%s: %v (manager logs are in %s)", p.name, err, logDir)
			}
			all.add(r)
		}
		rates[p.name] = all.rate()
		b.ReportMetric(all.rate(), p.name+"-releases/s")
		b.ReportMetric(float64(all.percentile(50))/float64(time.Millisecond), p.name+"-p50-ms")
		b.ReportMetric(float64(all.percentile(99))/float64(time.Millisecond), p.name+"-p99-ms")
		all.reportCPU(b, p.name, "release")
		b.ReportMetric(all.writesPerClaim(), p.name+"-writes/release")
		b.ReportMetric(all.readsPerClaim(), p.name+"-reads/release")
	}
	for _, p := range providers {
		if p.name != floorName {
			b.ReportMetric(rates[p.name]/rates[floorName], p.name+"-x-floor")
		}
	}
}

// measureRelease binds releaseClaims claims in a fresh environment running
// only p's manager, then measures their release once the environment is
// idle, and checks that nothing of them is left.
func measureRelease(ctx context.Context, b *testing.B, p provider) (result, error) {
	env, err := startAlone(p)
	if err != nil {
		return result{}, err
	}
	defer env.stop()
	s, err := newScenario(ctx, env, p, 0)
	if err != nil {
		return result{}, err
	}
	if _, err := s.bind(ctx, wave{name: "claim", n: releaseClaims, creators: creators}); err != nil {
		return result{}, err
	}
	if err := s.verify(ctx, releaseClaims, 0); err != nil {
		return result{}, err
	}
	r, err := s.measure(ctx, b, func() (result, error) { return s.release(ctx) })
	if err != nil {
		return result{}, err
	}
	return r, s.verify(ctx, 0, 0)
}

// release deletes every claim of the scenario at once and returns when each
// claim and its IPAddress are gone, with each claim's time from its delete
// request to the later of the two.
func (s *scenario) release(ctx context.Context) (result, error) {
	var claims ipamv1.IPAddressClaimList
	if err := s.env.k8s.List(ctx, &claims, client.InNamespace(s.ns)); err != nil {
		return result{}, err
	}
	n := len(claims.Items)
	// pending counts, per claim, its objects not seen gone yet.
	var mu sync.Mutex
	pending := make(map[string]int, 2*n)
	owner := make(map[string]int, 2*n) // "kind/name" -> index of the claim
	requested, released := make([]time.Time, n), make([]time.Time, n)
	left := n
	allGone := make(chan struct{})
	for i, c := range claims.Items {
		owner["claim/"+c.Name] = i
		owner["address/"+c.Status.AddressRef.Name] = i
		pending[c.Name] = 2
	}
	gone := func(kind, name string) {
		mu.Lock()
		defer mu.Unlock()
		i, ok := owner[kind+"/"+name]
		if !ok {
			return
		}
		delete(owner, kind+"/"+name)
		claim := claims.Items[i].Name
		if pending[claim]--; pending[claim] == 0 {
			released[i] = time.Now()
			if left--; left == 0 {
				close(allGone)
			}
		}
	}
	stop, err := s.watchGone(ctx, gone)
	if err != nil {
		return result{}, err
	}
	defer stop()

	err = forEach(ctx, n, creators, func(i int) error {
		requested[i] = time.Now()
		return s.env.k8s.Delete(ctx, &claims.Items[i])
	})
	if err != nil {
		return result{}, err
	}
	select {
	case <-allGone:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		return result{}, fmt.Errorf("%d of %d claims not released: %w", left, n, ctx.Err())
	}
	r := result{latencies: make([]time.Duration, n)}
	for i := range n {
		r.latencies[i] = released[i].Sub(requested[i])
	}
	r.span = slices.MaxFunc(released, time.Time.Compare).Sub(slices.MinFunc(requested, time.Time.Compare))
	return r, nil
}

// watchGone calls onGone with "claim" or "address" and the name of every
// IPAddressClaim and IPAddress of the namespace a watch sees deleted.
func (s *scenario) watchGone(ctx context.Context, onGone func(kind, name string)) (stop func(), err error) {
	deleted := func(kind string) toolscache.ResourceEventHandler {
		return toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(o any) {
			if tombstone, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = tombstone.Obj
			}
			if o, ok := o.(client.Object); ok {
				onGone(kind, o.GetName())
			}
		}}
	}
	return s.watch(ctx, map[client.Object]toolscache.ResourceEventHandler{
		&ipamv1.IPAddressClaim{}: deleted("claim"),
		&ipamv1.IPAddress{}:      deleted("address"),
	})
}
