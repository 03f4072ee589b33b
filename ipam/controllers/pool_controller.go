package controllers

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cappv1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// poolsByPacketCluster indexes pools by the PacketCluster of their
// spec.networkRef, so that a change to it reaches exactly the pools reading it.
const poolsByPacketCluster = "metal-vrf.ipam/pools-by-packetcluster"

// maxSourceRetry bounds the wait before resolving failed sources again.
const maxSourceRetry = 30 * time.Second

// poolReconciler keeps a pool's status (resolved sources, counts, Ready,
// SourcesResolved, Paused) and holds its deletion until no address of it is
// in use. One instance serves one kind. Its phases record facts; the
// deferred patch derives the conditions from them (pool_status.go).
type poolReconciler struct {
	client   client.Client
	registry *registry.Registry
	sources  *sourceResolver
	recorder events.EventRecorder
	releases *releases
	kind     string
	// cluster identifies this management cluster (see reconcileAllocator).
	cluster string
	tokens  handoverTokens
	// resync is how often the sources of a pool are read again when nothing
	// triggers it: the Metal API sends no events.
	resync time.Duration
}

func (r *poolReconciler) setupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	pool, _ := poolref.New(r.kind)
	b := ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(r.kind)).
		For(pool, builder.WithPredicates(notOnlyCounts())).
		Watches(&ipamv1.IPAddress{}, r.countsChanged()).
		// Secrets are not watched: RBAC cannot grant a watch, even of
		// metadata, without the data of every Secret. The resolver gets the
		// one a pool names when it resolves (see reconcileSources for when).
		WatchesRawSource(r.releases.poolSource(r.kind)).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), ctrl.LoggerFrom(ctx), opts.WatchFilterValue)).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Concurrency})
	if r.sources.packetClusters {
		b = b.Watches(&cappv1.PacketCluster{}, handler.EnqueueRequestsFromMapFunc(r.poolsIndexedBy(poolsByPacketCluster)))
	}
	return b.Complete(r)
}

// Reconcile brings one pool's status up to date.
func (r *poolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	pool, _ := poolref.New(r.kind)
	if err := r.client.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	cluster, err := r.clusterOf(ctx, pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.client, cluster, pool); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}

	patchHelper, err := patch.NewHelper(pool, r.client)
	if err != nil {
		return ctrl.Result{}, err
	}
	var facts poolFacts
	defer func() {
		setPoolStatus(pool, facts)
		if err := patchHelper.Patch(ctx, pool, patch.WithOwnedConditions{Conditions: []string{
			v1alpha1.ReadyCondition, v1alpha1.SourcesResolvedCondition,
		}}); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	if !pool.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, pool, &facts)
	}
	return r.reconcileNormal(ctx, pool, &facts)
}

func (r *poolReconciler) reconcileNormal(ctx context.Context, pool v1alpha1.Pool, facts *poolFacts) (ctrl.Result, error) {
	controllerutil.AddFinalizer(pool, v1alpha1.ProtectPoolFinalizer)

	requeueAfter, err := r.reconcileSources(ctx, pool, facts)
	if err != nil {
		return ctrl.Result{}, err
	}
	handOverWaits, err := r.reconcileAllocator(ctx, pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	stats, err := r.registry.Stats(ctx, pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	var outOfRangeBefore int64
	if summary := pool.PoolStatus().IPAddresses; summary != nil {
		outOfRangeBefore = summary.OutOfRange
	}
	r.publish(pool, stats)
	if stats.OutOfRange > outOfRangeBefore {
		r.warnNetworkShrunk(ctx, pool, stats.OutOfRange)
	}

	facts.ready = r.counted(pool, stats, facts.sources, handOverWaits)
	// Ready, as last written, says whether the pool was exhausted before.
	if c := poolReady(facts.ready); c.Reason == v1alpha1.ExhaustedReason && conditions.GetReason(pool, c.Type) != c.Reason {
		r.recorder.Eventf(pool, nil, corev1.EventTypeWarning, v1alpha1.ExhaustedReason, "Allocate", "All %s addresses are in use", stats.Total)
	}
	pool.PoolStatus().ObservedGeneration = pool.GetGeneration()
	return ctrl.Result{RequeueAfter: requeueAfter}, nil
}

// counted is what the pool's counts, its sources and a hand-over that
// waits (handOverWaits) show of whether it serves claims.
func (r *poolReconciler) counted(pool v1alpha1.Pool, stats registry.Stats, sources fact, handOverWaits map[string]int) poolCounted {
	f := poolCounted{
		stats:              stats,
		handedOver:         pool.GetAnnotations()[v1alpha1.AllocatingClusterAnnotation] == r.cluster,
		handOverWaits:      handOverWaits,
		idleExclusions:     poolspace.IdleExclusions(pool.PoolSpec(), pool.PoolStatus().Resolved),
		idlePreAllocations: poolspace.IdlePreAllocations(pool.PoolSpec(), pool.PoolStatus().Resolved),
	}
	if failed, ok := sources.(sourcesFailed); ok && len(pool.PoolStatus().Resolved) == 0 {
		f.unresolved = &failed
	}
	if stats.Foreign > 0 {
		f.foreignVRF = pool.PoolSpec().VRF.ID
	}
	return f
}

// warnNetworkShrunk tells the PacketCluster whose network feeds the pool
// that the network no longer holds addresses in use: the one who shrank it
// looks there, not at the pool. The addresses stay with their machines.
func (r *poolReconciler) warnNetworkShrunk(ctx context.Context, pool v1alpha1.Pool, outOfRange int64) {
	ref := pool.PoolSpec().NetworkRef
	if ref == nil || !r.sources.packetClusters {
		return
	}
	cluster := &cappv1.PacketCluster{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: pool.GetNamespace(), Name: ref.Name}, cluster); err != nil {
		return // gone: the pool's SourcesResolved condition says so
	}
	r.recorder.Eventf(cluster, pool, corev1.EventTypeWarning, "AddressesOutsideNetwork", "ResolveSources",
		"network %s no longer holds %d addresses in use of %s %s (see its status.ipAddresses.outOfRange): they stay with their machines until released; give the network its addresses back, or replace those machines",
		message.Quote(ref.Network), outOfRange, poolref.KindOf(pool), pool.GetName())
}

// reconcileSources resolves spec.vrf and spec.networkRef into
// status.resolved and records how it went for SourcesResolved. It returns
// when to resolve again: after the resync period, or sooner after a failure.
//
// A source that failed keeps the entries it gave last time when the failure
// may pass (the Metal API is down, the credentials are being fixed), so
// allocation goes on from them, and the condition says they are stale. A
// source that says its addresses are gone drops them; addresses in use from
// them stay allocated as out of range, never revoked.
func (r *poolReconciler) reconcileSources(ctx context.Context, pool v1alpha1.Pool, facts *poolFacts) (time.Duration, error) {
	status := pool.PoolStatus()
	spec := pool.PoolSpec()
	if spec.VRF == nil {
		status.VRF = nil
	}
	if spec.VRF == nil && spec.NetworkRef == nil {
		status.Resolved, status.LastSyncTime = nil, nil
		facts.sources = noSources{}
		return 0, nil
	}
	results, err := r.sources.resolve(ctx, pool)
	if err != nil {
		return 0, err
	}

	resolved, failed, reason, stale := combineSources(results, spec, status)
	if !equality.Semantic.DeepEqual(resolved, status.Resolved) {
		r.recorder.Eventf(pool, nil, corev1.EventTypeNormal, "SourcesChanged", "ResolveSources", "The pool's sources now give %d address entries (were %d)", len(resolved), len(status.Resolved))
		status.Resolved = resolved
	}

	if len(failed) == 0 {
		status.LastSyncTime = ptr.To(metav1.NewTime(oldestRead(results)))
		facts.sources = sourcesResolved{len(resolved)}
		return r.resync, nil
	}
	facts.sources = sourcesFailed{reason, failed, stale, status.LastSyncTime}
	if c := sourcesResolvedCondition(facts.sources); conditions.GetReason(pool, c.Type) != c.Reason {
		r.recorder.Eventf(pool, nil, corev1.EventTypeWarning, c.Reason, "ResolveSources", "%s", c.Message)
	}
	return min(r.resync, maxSourceRetry), nil
}

// oldestRead is when the least recently read of the results was read: the
// time the pool's sources were last read, all of them.
func oldestRead(results []sourceResult) time.Time {
	oldest := results[0].readAt
	for _, r := range results[1:] {
		if r.readAt.Before(oldest) {
			oldest = r.readAt
		}
	}
	return oldest
}

// combineSources folds the sources' results into what the pool serves: the
// entries that resolved and, for a source that failed in a way that keeps
// them, its entries of the last resolution (stale). It returns the failures'
// messages and the first one's reason, and keeps status.vrf current.
func combineSources(results []sourceResult, spec *v1alpha1.MetalVRFIPPoolSpec, status *v1alpha1.MetalVRFIPPoolStatus) (resolved []v1alpha1.ResolvedAddresses, failed []string, reason string, stale bool) {
	for _, result := range results {
		if spec.VRF != nil && result.source == vrfSource(spec.VRF.ID) {
			switch {
			case result.failure == nil:
				status.VRF = result.vrf.DeepCopy() // result may be a kept read (vrfReads)
			case !result.failure.keep:
				status.VRF = nil
			}
		}
		if result.failure == nil {
			resolved = append(resolved, result.entries...)
			continue
		}
		if reason == "" {
			reason = result.failure.reason
		}
		failed = append(failed, result.failure.message)
		if result.failure.keep {
			for _, entry := range status.Resolved {
				if entry.Source == result.source || strings.HasPrefix(entry.Source, result.source+"/") {
					resolved = append(resolved, entry)
					stale = true
				}
			}
		}
	}
	return resolved, failed, reason, stale
}

// reconcileDelete lets the pool go once none of its addresses is in use, or
// at once when clusterctl move (or an admin, with the skip annotation) says
// the addresses live on elsewhere.
func (r *poolReconciler) reconcileDelete(ctx context.Context, pool v1alpha1.Pool, facts *poolFacts) error {
	stats, err := r.registry.Stats(ctx, pool)
	if err != nil {
		return err
	}
	if stats.Used > 0 && !deletionForced(pool) {
		facts.ready = waitingForRelease{stats.Used}
		return nil
	}
	if err := r.registry.Forget(ctx, pool); err != nil {
		return err
	}
	r.sources.reads.forget(pool.GetUID())
	poolAddresses.DeletePartialMatch(map[string]string{"kind": r.kind, "namespace": pool.GetNamespace(), "name": pool.GetName()})
	controllerutil.RemoveFinalizer(pool, v1alpha1.ProtectPoolFinalizer)
	return nil
}

// publish writes the counts to status and to the pool gauges.
func (r *poolReconciler) publish(pool v1alpha1.Pool, stats registry.Stats) {
	pool.PoolStatus().IPAddresses = &v1alpha1.IPAddressesSummary{
		Total:      stats.Total.String(),
		Free:       stats.Free.String(),
		Used:       stats.Used,
		OutOfRange: stats.OutOfRange,
	}
	total, _ := stats.Total.Float64()
	free, _ := stats.Free.Float64()
	for state, value := range map[string]float64{
		"total": total, "free": free, "used": float64(stats.Used), "out_of_range": float64(stats.OutOfRange),
		"retired": float64(stats.Retired),
	} {
		poolAddresses.WithLabelValues(r.kind, pool.GetNamespace(), pool.GetName(), state).Set(value)
	}
}

// clusterOf returns the Cluster named by the pool's cluster-name label, if
// any, so a paused Cluster pauses its pools as it pauses everything else.
func (r *poolReconciler) clusterOf(ctx context.Context, pool v1alpha1.Pool) (*clusterv1.Cluster, error) {
	name, ok := pool.GetLabels()[clusterv1.ClusterNameLabel]
	if !ok || pool.GetNamespace() == "" {
		return nil, nil
	}
	cluster, err := util.GetClusterByName(ctx, r.client, pool.GetNamespace(), name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return cluster, err
}

// countsRefreshDelay gathers the IPAddress events of a pool into one status
// update: under a burst of claims the counts are refreshed once per delay,
// not once per address, which would compete with the claims' own writes.
const countsRefreshDelay = time.Second

// countsChanged queues the pool of an IPAddress that came or went, when the
// pool is of this kind, after countsRefreshDelay.
func (r *poolReconciler) countsChanged() handler.Funcs {
	enqueue := func(obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		address, ok := obj.(*ipamv1.IPAddress)
		if !ok {
			return
		}
		if key, ok := poolref.For(address.Spec.PoolRef, address.Namespace); ok && key.Kind == r.kind {
			q.AddAfter(reconcile.Request{NamespacedName: key.ObjectKey()}, countsRefreshDelay)
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, q)
		},
	}
}

// notOnlyCounts drops the update events of a pool whose only change is its
// counts, which the pool writes itself: under a burst of claims each count
// refresh would otherwise trigger the next one at once, defeating
// countsRefreshDelay. Any other change, its own condition and source writes
// included, still wakes the pool; the generation covers the spec and the
// start of a deletion.
func notOnlyCounts() predicate.Funcs {
	return poolUpdates(func(before, after v1alpha1.Pool) bool {
		statusBefore, statusAfter := *before.PoolStatus(), *after.PoolStatus()
		statusBefore.IPAddresses, statusAfter.IPAddresses = nil, nil
		return before.GetGeneration() != after.GetGeneration() ||
			!maps.Equal(before.GetLabels(), after.GetLabels()) ||
			!maps.Equal(before.GetAnnotations(), after.GetAnnotations()) ||
			!slices.Equal(before.GetFinalizers(), after.GetFinalizers()) ||
			!equality.Semantic.DeepEqual(statusBefore, statusAfter)
	})
}

// poolUpdates passes the updates of a pool that pass lets through, and
// every other event.
func poolUpdates(pass func(before, after v1alpha1.Pool) bool) predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		before, okBefore := e.ObjectOld.(v1alpha1.Pool)
		after, okAfter := e.ObjectNew.(v1alpha1.Pool)
		return !okBefore || !okAfter || pass(before, after)
	}}
}

// poolsIndexedBy maps an object to the pools of this kind whose sources
// name it, through the given field index.
func (r *poolReconciler) poolsIndexedBy(index string) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		key := client.ObjectKeyFromObject(obj).String()
		list := poolref.NewList(r.kind)
		if err := r.client.List(ctx, list, client.MatchingFields{index: key}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the pools of an object", "index", index, "object", key)
			return nil
		}
		var requests []reconcile.Request
		_ = meta.EachListItem(list, func(item runtime.Object) error {
			pool := item.(client.Object)
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pool)})
			return nil
		})
		return requests
	}
}

// indexPoolPacketCluster indexes a pool by the PacketCluster of its spec.networkRef.
func indexPoolPacketCluster(obj client.Object) []string {
	pool, ok := obj.(v1alpha1.Pool)
	if !ok || pool.PoolSpec().NetworkRef == nil || pool.GetNamespace() == "" {
		return nil
	}
	return []string{types.NamespacedName{Namespace: pool.GetNamespace(), Name: pool.PoolSpec().NetworkRef.Name}.String()}
}

// deletionForced reports whether the pool may go with addresses in use.
func deletionForced(pool v1alpha1.Pool) bool {
	_, skip := pool.GetAnnotations()[v1alpha1.SkipDeleteValidationAnnotation]
	_, move := pool.GetAnnotations()[clusterctlv1.DeleteForMoveAnnotation]
	return skip || move
}
