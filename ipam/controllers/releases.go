package controllers

import (
	"context"
	"slices"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// releases tells the controllers that an address of a pool was released:
// the claim controller, to serve the claims waiting on the pool, and the
// pool's own controller, to update its counts or finish its deletion. No
// watch event carries this: the IPAddress is gone before the registry frees
// its address, so a reconcile triggered by its deletion may still count it.
type releases struct {
	claims chan event.GenericEvent
	pools  map[string]chan event.GenericEvent // by pool kind
}

func newReleases(kinds ...string) *releases {
	r := &releases{claims: make(chan event.GenericEvent, 1024), pools: map[string]chan event.GenericEvent{}}
	for _, kind := range kinds {
		r.pools[kind] = make(chan event.GenericEvent, 1024)
	}
	return r
}

// claimSource feeds the claim controller; h maps a pool to its waiting claims.
func (r *releases) claimSource(h handler.EventHandler) source.Source {
	return source.Channel(r.claims, h)
}

// poolSource feeds the controller of one pool kind, after
// countsRefreshDelay: the releases of a burst of deleted claims then make
// one count refresh per delay, as the IPAddress events do (countsChanged),
// not one status write per release.
func (r *releases) poolSource(kind string) source.Source {
	return source.Channel(r.pools[kind], handler.Funcs{
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.AddAfter(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)}, countsRefreshDelay)
		},
	})
}

// released announces a release. The channels are drained into work queues
// as fast as they fill, so a send waits only under a burst of releases.
func (r *releases) released(ctx context.Context, key poolref.Key) {
	r.send(ctx, key, r.claims, r.pools[key.Kind])
}

// releasedAll announces the release of a claim of pool, which gained the
// pools in gained (see registry.Release). The claim's own pool is announced
// whether or not this process's memory gained an address: its record is
// gone from the store either way, and without leader election the address
// may be known as taken only to another replica, whose release of the
// claim lost the race to this one: the waiting claims this process serves
// must hear of it, or the address stays free with claims waiting.
func (r *releases) releasedAll(ctx context.Context, pool poolref.Key, gained []poolref.Key) {
	if !slices.Contains(gained, pool) {
		gained = append(gained, pool)
	}
	for _, key := range gained {
		r.released(ctx, key)
	}
}

// counted tells the pool's controller that its counts changed without an
// IPAddress coming or going: an existing one was adopted or retired.
func (r *releases) counted(ctx context.Context, key poolref.Key) {
	r.send(ctx, key, r.pools[key.Kind])
}

func (r *releases) send(ctx context.Context, key poolref.Key, channels ...chan event.GenericEvent) {
	for _, ch := range channels {
		pool, _ := poolref.New(key.Kind)
		pool.SetNamespace(key.Namespace)
		pool.SetName(key.Name)
		select {
		case ch <- event.GenericEvent{Object: pool}:
		case <-ctx.Done():
			return
		}
	}
}
