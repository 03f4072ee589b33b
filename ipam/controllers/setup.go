// Package controllers holds the IPAM provider's controllers: the claim
// reconciler, which allocates through ipam/internal/registry; the pool
// reconciler that resolves pool sources (Metal VRFs, PacketCluster
// networks), keeps pool status, deletion protection and where a global pool
// allocates; and the IPAddress reconciler that releases what a claim left
// behind. The claim's and the pool's conditions are derived from the facts
// their reconciles record (claim_status.go, pool_status.go).
package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cappv1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/records"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/managerutil"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// Options configure the controllers.
type Options struct {
	// WatchFilterValue restricts reconciliation to objects labelled
	// cluster.x-k8s.io/watch-filter=<value>, for sharding.
	WatchFilterValue string
	// Concurrency is the number of claims, and of pools, reconciled at once.
	Concurrency int
	// SourceResyncPeriod is how often a pool's sources (spec.vrf,
	// spec.networkRef) are read again when no watch event triggers it;
	// DefaultSourceResyncPeriod when zero.
	SourceResyncPeriod time.Duration
	// Metal tunes the Metal API clients built from the pools' credentials
	// Secrets, as the base Config of a metal.ClientCache: the credentials
	// come from the Secrets.
	Metal metal.Config
	// Endpoints are the Metal APIs a credentials Secret may name in
	// baseURL; nil allows the public API only.
	Endpoints *metal.Endpoints
	// AllocationNamespace holds the allocation records (see
	// ipam/internal/records) and the global pools' hand-over tokens.
	AllocationNamespace string
	// Fence, when set, is asked before every allocation; an error refuses
	// it and the claim is retried (see manager's leader election fence).
	Fence func() error
	// Writer names this process (its leader election identity) on the
	// allocation records it creates, and the Lease that fences them.
	Writer records.Writer
	// PendingGrace is how long after it was last confirmed the record of an
	// IPAddress that was not created is reaped; registry.DefaultPendingGrace
	// when zero. Tests shorten it.
	PendingGrace time.Duration
	// AdoptionSettle is how long the claims and IPAddresses of an in-cluster
	// pool paused for adoption must be seen unchanged before this provider
	// serves it (adoptionReconciler.quiet); DefaultAdoptionSettle when zero.
	AdoptionSettle time.Duration
}

// DefaultSourceResyncPeriod is how often pool sources are read again by default.
const DefaultSourceResyncPeriod = 10 * time.Minute

// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=metalvrfippools;globalmetalvrfippools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=metalvrfippools/status;globalmetalvrfippools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=metalvrfippools/finalizers;globalmetalvrfippools/finalizers,verbs=update
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddresses,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=packetclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=namespaces,resourceNames=kube-system,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the claim, IPAddress and pool controllers with
// mgr, and returns the registry they hand addresses out through.
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) (*registry.Registry, error) {
	if opts.Concurrency < 1 {
		opts.Concurrency = 1
	}
	if opts.SourceResyncPeriod <= 0 {
		opts.SourceResyncPeriod = DefaultSourceResyncPeriod
	}
	if err := addIndexes(ctx, mgr); err != nil {
		return nil, err
	}
	sources, err := newSourceResolver(ctx, mgr, opts)
	if err != nil {
		return nil, err
	}

	cluster, err := managementCluster(ctx, mgr.GetAPIReader())
	if err != nil {
		return nil, err
	}
	recorder := mgr.GetEventRecorder("metal-vrf-ipam")
	store := records.New(mgr.GetClient(), mgr.GetAPIReader(), opts.AllocationNamespace, opts.Writer)
	store.OnSkip(seedSkipped(recorder))
	store.OnStaleFence(staleFence(ctrl.LoggerFrom(ctx)))
	reg := registry.New(store, opts.Fence, cluster)
	if opts.PendingGrace > 0 {
		reg.SetPendingGrace(opts.PendingGrace)
	}
	releases := newReleases(v1alpha1.MetalVRFIPPoolKind, v1alpha1.GlobalMetalVRFIPPoolKind)
	claims := &claimReconciler{
		client: mgr.GetClient(), reader: mgr.GetAPIReader(), scheme: mgr.GetScheme(), recorder: recorder, registry: reg,
		releases: releases, concurrency: opts.Concurrency, watchFilterValue: opts.WatchFilterValue,
	}
	if err := claims.setupWithManager(ctx, mgr); err != nil {
		return nil, fmt.Errorf("setting up the claim controller: %w", err)
	}
	pending := &pendingCollector{reader: mgr.GetClient(), inShard: claims.inShard, now: time.Now}
	if err := managerutil.CollectWhileLeading(mgr, metrics.Registry, pending); err != nil {
		return nil, fmt.Errorf("setting up the pending claims metrics: %w", err)
	}

	for _, kind := range []string{v1alpha1.MetalVRFIPPoolKind, v1alpha1.GlobalMetalVRFIPPoolKind} {
		pools := &poolReconciler{
			client: mgr.GetClient(), registry: reg, sources: sources, recorder: recorder,
			releases: releases, kind: kind, cluster: cluster, resync: opts.SourceResyncPeriod,
			tokens: handoverTokens{reader: mgr.GetAPIReader(), client: mgr.GetClient(), namespace: opts.AllocationNamespace},
		}
		if err := pools.setupWithManager(ctx, mgr, opts); err != nil {
			return nil, fmt.Errorf("setting up the %s controller: %w", kind, err)
		}
	}
	reaper := &recordsReaper{client: mgr.GetClient(), live: mgr.GetAPIReader(), registry: reg, releases: releases, recorder: recorder}
	addresses := &addressReconciler{
		client: mgr.GetClient(), reader: mgr.GetAPIReader(), registry: reg, releases: releases, recorder: recorder,
		gone: newGoneClaims(), unbound: reaper.enqueue,
	}
	if err := addresses.setupWithManager(ctx, mgr, opts); err != nil {
		return nil, fmt.Errorf("setting up the IPAddress controller: %w", err)
	}
	if err := setupAdoption(ctx, mgr, recorder, opts, cluster); err != nil {
		return nil, err
	}
	if err := reaper.setupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the pending records controller: %w", err)
	}
	return reg, nil
}

// seedSkipped tells of an object seeding could not use where its owner
// looks, a Warning event on it, and counts it. The recorder sends events
// in the background: seeding, which holds its domain's lock, does not wait.
func seedSkipped(recorder events.EventRecorder) func(records.Skip) {
	return func(skip records.Skip) {
		recorder.Eventf(skip.Object, nil, corev1.EventTypeWarning, skip.Reason, "Seed", "%s", skip.Message)
		seedSkippedTotal.WithLabelValues(skip.Kind, skip.Reason).Inc()
	}
}

// staleFence tells of a record created past the API server's stale fence
// (see records.Store.OnStaleFence): an error in the log and a count, since
// only a restart of the API server mends the fence.
func staleFence(log logr.Logger) func(error) {
	return func(refusal error) {
		log.Error(refusal, "The API server's allocation fence refused a record of this leader, which holds the Lease: "+
			"it judges by a stale copy of the Lease (kubernetes/kubernetes#130887, after the fence's binding was deleted, "+
			"as clusterctl upgrade does). The record was created without the fence; restart the API server to mend it.")
		staleFenceRecordsTotal.Inc()
	}
}

// addIndexes adds the cache's indexes of unbound claims by pool and of pools
// by PacketCluster.
func addIndexes(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &ipamv1.IPAddressClaim{}, unboundClaimsByPool, indexUnboundClaim); err != nil {
		return fmt.Errorf("indexing claims by pool: %w", err)
	}
	for _, pool := range []client.Object{&v1alpha1.MetalVRFIPPool{}, &v1alpha1.GlobalMetalVRFIPPool{}} {
		if err := mgr.GetFieldIndexer().IndexField(ctx, pool, poolsByPacketCluster, indexPoolPacketCluster); err != nil {
			return fmt.Errorf("indexing pools by PacketCluster: %w", err)
		}
	}
	return nil
}

// newSourceResolver builds the resolver of pool sources. The IPAM provider
// is installed without CAPP as often as with it: PacketClusters are only
// read when their CRD is there.
func newSourceResolver(ctx context.Context, mgr ctrl.Manager, opts Options) (*sourceResolver, error) {
	_, err := mgr.GetRESTMapper().RESTMapping(cappv1.GroupVersion.WithKind("PacketCluster").GroupKind(), cappv1.GroupVersion.Version)
	switch {
	case meta.IsNoMatchError(err):
		ctrl.LoggerFrom(ctx).Info("The PacketCluster CRD is not installed: pools with spec.networkRef will say so")
	case err != nil:
		return nil, fmt.Errorf("looking up the PacketCluster CRD: %w", err)
	}
	return &sourceResolver{
		reader:         mgr.GetAPIReader(),
		client:         mgr.GetClient(),
		packetClusters: err == nil,
		metal:          metal.NewClientCache(opts.Metal, metal.CacheOptions{Endpoints: opts.Endpoints}),
		maxAge:         opts.SourceResyncPeriod,
		now:            time.Now,
	}, nil
}

// managementCluster identifies the management cluster: the UID of its
// kube-system namespace, which every cluster has and no other shares.
func managementCluster(ctx context.Context, reader client.Reader) (string, error) {
	ns := &corev1.Namespace{}
	if err := reader.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, ns); err != nil {
		return "", fmt.Errorf("reading namespace %s, which identifies the management cluster: %w", metav1.NamespaceSystem, err)
	}
	return string(ns.UID), nil
}

// setupAdoption runs the adoption of the in-cluster provider's pools
// (adoption.go), of each kind whose CRD is installed; without it the
// provider runs as before, and a claim of that kind is never served
// (adoptionServes finds no companion).
func setupAdoption(ctx context.Context, mgr ctrl.Manager, recorder events.EventRecorder, opts Options, cluster string) error {
	settle := opts.AdoptionSettle
	if settle <= 0 {
		settle = DefaultAdoptionSettle
	}
	for _, kind := range []string{
		v1alpha1.InClusterIPPoolKind, v1alpha1.GlobalInClusterIPPoolKind,
		v1alpha1.InClusterPrefixPoolKind, v1alpha1.GlobalInClusterPrefixPoolKind,
	} {
		_, err := mgr.GetRESTMapper().RESTMapping(v1alpha1.GroupVersion.WithKind(kind).GroupKind())
		switch {
		case meta.IsNoMatchError(err):
			ctrl.LoggerFrom(ctx).Info("The CRD of the in-cluster provider's pools of this kind is not installed: none is adopted", "kind", kind)
			continue
		case err != nil:
			return fmt.Errorf("looking up the %s CRD: %w", kind, err)
		}
		adoption := &adoptionReconciler{
			kind: kind, client: mgr.GetClient(), reader: mgr.GetAPIReader(), recorder: recorder,
			settle: settle, now: time.Now, cluster: cluster,
		}
		if err := adoption.setupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the %s adoption controller: %w", kind, err)
		}
	}
	return nil
}
