package controllers

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

var (
	pendingClaimsDesc = prometheus.NewDesc("metal_vrf_ipam_pool_pending_claims",
		"Claims waiting for an address from a pool (unbound and not being deleted), by pool. A pool no claim waits on has no series.",
		[]string{"kind", "namespace", "name"}, nil)
	oldestPendingClaimDesc = prometheus.NewDesc("metal_vrf_ipam_pool_oldest_pending_claim_age_seconds",
		"Time since the oldest claim waiting for an address from a pool was created, by pool.",
		[]string{"kind", "namespace", "name"}, nil)
)

// collectTimeout bounds the cache reads of one scrape.
const collectTimeout = 10 * time.Second

// pendingCollector reports, at each scrape, the claims that wait for an
// address from each pool and how long the oldest has waited. It reads the
// manager's cache at scrape time rather than counting events, so what it
// says holds across restarts and for claims no reconcile has seen yet (a
// pool that does not exist, a Cluster that is paused). It reads only the
// claims the cache indexes as waiting (unboundClaimsByPool under anyPool):
// a scrape costs the claims that wait, not every claim of the cluster.
type pendingCollector struct {
	reader client.Reader
	// inShard says whether this manager serves the claim (see
	// claimReconciler.inShard), so shards do not report one claim twice.
	inShard func(context.Context, *ipamv1.IPAddressClaim) (bool, error)
	now     func() time.Time
}

func (c *pendingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingClaimsDesc
	ch <- oldestPendingClaimDesc
}

func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	var list ipamv1.IPAddressClaimList
	if err := c.reader.List(ctx, &list, client.MatchingFields{unboundClaimsByPool: anyPool}, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(pendingClaimsDesc, err)
		return
	}
	claims := make([]ipamv1.IPAddressClaim, 0, len(list.Items))
	for i := range list.Items {
		ours, err := c.inShard(ctx, &list.Items[i])
		if err != nil {
			ch <- prometheus.NewInvalidMetric(pendingClaimsDesc, err)
			return
		}
		if ours {
			claims = append(claims, list.Items[i])
		}
	}
	now := c.now()
	for key, p := range pendingByPool(claims) {
		ch <- prometheus.MustNewConstMetric(pendingClaimsDesc, prometheus.GaugeValue, float64(p.count), key.Kind, key.Namespace, key.Name)
		ch <- prometheus.MustNewConstMetric(oldestPendingClaimDesc, prometheus.GaugeValue, max(now.Sub(p.oldest).Seconds(), 0), key.Kind, key.Namespace, key.Name)
	}
}

// pending are the claims that wait on one pool.
type pending struct {
	count int
	// oldest is the creation time of the claim that has waited longest.
	oldest time.Time
}

// pendingByPool groups the claims of this provider's pools that hold no
// address and are not being deleted by the pool they wait on.
func pendingByPool(claims []ipamv1.IPAddressClaim) map[poolref.Key]pending {
	pools := map[poolref.Key]pending{}
	for i := range claims {
		claim := &claims[i]
		if claim.Status.AddressRef.Name != "" || !claim.DeletionTimestamp.IsZero() {
			continue
		}
		// An adopted in-cluster pool's claims are reported under its
		// companion; the collector leaves out those of a pool not adopted
		// (yet): inShard says they are not this provider's.
		key, ok := poolref.For(claim.Spec.PoolRef, claim.Namespace)
		if !ok {
			continue
		}
		p, seen := pools[key]
		created := claim.CreationTimestamp.Time
		if !seen || created.Before(p.oldest) {
			p.oldest = created
		}
		p.count++
		pools[key] = p
	}
	return pools
}
