package records_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// The cluster a new leader takes over in BenchmarkSeedAfterFailover.
const (
	failoverPools      = 1000
	failoverPerPool    = 50
	failoverNamespaces = 10
	failoverWorkers    = 32
)

// BenchmarkSeedAfterFailover: a management cluster holds 50,000 addresses
// in use (their claims, IPAddresses and records) in 1,000 pools. A new
// leader's registry then serves one new claim in every pool at once, as
// after a failover, where each pool's domain seeds first. Reported: the
// time to the first allocation and to all of them, and the API requests
// the store made (reads and writes), against a real API server. It leaves
// out controller-runtime's initial reconcile of every existing claim,
// which any controller pays.
func BenchmarkSeedAfterFailover(b *testing.B) {
	ctx := b.Context()
	env := start(b)
	pools, err := fillCluster(ctx, env)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for n := range b.N {
		reader := &countingReader{Reader: env.Client, lists: map[string]int{}}
		writer := &countingWriter{Client: env.Client}
		reg := registry.New(records.New(writer, reader, testenv.AllocationNamespace, records.Writer{Identity: "bench"}), nil, "bench")
		start := time.Now()
		var first atomic.Int64
		err := forEach(ctx, len(pools), failoverWorkers, func(i int) error {
			pool := pools[i]
			claim := registry.Claim{
				NamespacedName: types.NamespacedName{Namespace: pool.Namespace, Name: fmt.Sprintf("new-%s-%d", pool.Name, n)},
				UID:            types.UID(fmt.Sprintf("new-%s-%s-%d", pool.Namespace, pool.Name, n)),
			}
			if _, _, err := reg.Acquire(ctx, pool, claim, netip.Addr{}); err != nil {
				return fmt.Errorf("pool %s: %w", poolref.KeyOf(pool), err)
			}
			first.CompareAndSwap(0, int64(time.Since(start)))
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Duration(first.Load()).Seconds(), "first-allocation-s")
		b.ReportMetric(time.Since(start).Seconds(), "all-pools-s")
		lists, gets := reader.counts()
		b.ReportMetric(float64(lists), "lists")
		b.ReportMetric(float64(gets), "gets")
		b.ReportMetric(float64(writer.writes.Load()), "writes")
	}
}

// fillCluster creates the pools, and in each failoverPerPool claims, their
// IPAddresses and their records, as a leader that served them leaves them.
func fillCluster(ctx context.Context, env *testenv.Environment) ([]*v1alpha1.MetalVRFIPPool, error) {
	namespaces := make([]string, failoverNamespaces)
	for i := range namespaces {
		ns, err := env.NewNamespace(ctx, "failover")
		if err != nil {
			return nil, err
		}
		namespaces[i] = ns
	}
	store := records.New(env.Client, env.Client, testenv.AllocationNamespace, records.Writer{Identity: "filled"})
	pools := make([]*v1alpha1.MetalVRFIPPool, failoverPools)
	err := forEach(ctx, failoverPools, failoverWorkers, func(i int) error {
		pools[i] = &v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespaces[i%failoverNamespaces], Name: fmt.Sprintf("pool-%04d", i)},
			Spec: v1alpha1.MetalVRFIPPoolSpec{
				Addresses: []string{fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)}, Prefix: ptr.To[int32](24),
				Gateway: fmt.Sprintf("10.%d.%d.1", i/256, i%256),
			},
		}
		return env.Client.Create(ctx, pools[i])
	})
	if err != nil {
		return nil, fmt.Errorf("creating the pools: %w", err)
	}
	err = forEach(ctx, failoverPools*failoverPerPool, failoverWorkers, func(k int) error {
		pool, j := pools[k/failoverPerPool], k%failoverPerPool
		claim := &ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: pool.Namespace, Name: fmt.Sprintf("%s-held-%02d", pool.Name, j)},
			Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
				APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: pool.Name,
			}},
		}
		if err := env.Client.Create(ctx, claim); err != nil {
			return err
		}
		ip := fmt.Sprintf("10.%d.%d.%d", (k/failoverPerPool)/256, (k/failoverPerPool)%256, j+2)
		address := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: pool.Namespace, Name: claim.Name, OwnerReferences: []metav1.OwnerReference{
				{APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: claim.Name, UID: claim.UID, Controller: ptr.To(true)},
			}},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: claim.Name}, PoolRef: claim.Spec.PoolRef,
				Address: ip, Prefix: ptr.To[int32](24), Gateway: pool.Spec.Gateway,
			},
		}
		if err := env.Client.Create(ctx, address); err != nil {
			return err
		}
		return store.Reserve(ctx, registry.DomainOf(pool), registry.Record{Address: netip.MustParseAddr(ip), Holder: registry.Holder{
			Pool: poolref.KeyOf(pool), Claim: registry.Claim{NamespacedName: client.ObjectKeyFromObject(claim), UID: claim.UID},
		}})
	})
	if err != nil {
		return nil, fmt.Errorf("creating the addresses in use: %w", err)
	}
	return pools, nil
}

// countingWriter counts the writes it sends.
type countingWriter struct {
	client.Client
	writes atomic.Int64
}

func (w *countingWriter) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	w.writes.Add(1)
	return w.Client.Create(ctx, obj, opts...)
}

func (w *countingWriter) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	w.writes.Add(1)
	return w.Client.Delete(ctx, obj, opts...)
}

func (w *countingWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	w.writes.Add(1)
	return w.Client.Patch(ctx, obj, patch, opts...)
}

// forEach runs fn for 0..n-1 on workers goroutines, stopping at the first
// error.
func forEach(ctx context.Context, n, workers int, fn func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					cancel(err)
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}
