package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/pkg/ipamutil"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// addressVisibleTimeout bounds the wait for a new IPAddress to reach the
// cache (see reconcileNormal).
const addressVisibleTimeout = 5 * time.Second

// claimReconciler drives the CAPI IPAM contract for the claims of our pools:
// IPAddress, status.addressRef and the Ready condition, release on deletion. What is particular to our pools (finding the pool, handing out
// and taking back addresses through the registry) is in claim_allocation.go,
// called directly: reconcileNormal shows where an address is allocated
// (docs/contributing.md says why this is not ipamutil.ClaimReconciler
// behind ipamutil's interfaces). Its phases record what they observe in the
// claimScope; the deferred status write derives the Ready condition from
// it (claim_status.go).
//
// It keeps ipamutil.ClaimReconciler's contract: the IPAddress of
// ipamutil.NewIPAddress owned by its claim (controller) and its
// pool, the cluster-name label carried over, claims of a paused Cluster or a
// paused pool left alone, claims of a missing Cluster skipped but released
// on deletion. It differs in the writes a claim costs, because every write
// costs the API server far more than an allocation costs us:
//
//   - A claim is bound with one status write carrying status.addressRef and
//     the Ready condition. ipamutil's reconciler writes through CAPI's patch
//     helper, which sends conditions in a PATCH of their own before the rest
//     of the status: two writes. The one write is guarded by the
//     resourceVersion the reconcile read, as the patch helper guards its
//     conditions, so it never overwrites a change it did not see.
//   - A claim gets no finalizer: its release hangs on its IPAddress's
//     (ipamutil.ProtectAddressFinalizer), which the claim owns. A claim
//     that is gone leaves its IPAddress without a claim, which the address
//     reconciler deletes, freeing the address once a live read shows the
//     IPAddress gone; a record is never freed before that, so nothing is
//     handed out twice. The finalizer write ipamutil's reconciler makes
//     per claim, and its removal on deletion, are saved (docs/benchmarks.md).
//     A deleting claim that only the garbage collector's finalizers keep
//     (a foreground deletion waits for the IPAddress) is released here.
//     Claims that carry the release finalizer from an earlier version
//     have it removed once released.
type claimReconciler struct {
	client client.Client
	// reader reads through the API server where the cache could be stale.
	reader           client.Reader
	scheme           *runtime.Scheme
	recorder         events.EventRecorder
	registry         *registry.Registry
	releases         *releases
	concurrency      int
	watchFilterValue string
}

// Reconcile brings one claim to its desired state: bound while it lives,
// released once it is deleted.
func (r *claimReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	claim := &ipamv1.IPAddressClaim{}
	if err := r.client.Get(ctx, req.NamespacedName, claim); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ours, err := r.inShard(ctx, claim); !ours || err != nil {
		return ctrl.Result{}, err
	}
	if waiting, err := r.waitForCluster(ctx, claim); waiting || err != nil {
		return ctrl.Result{}, err
	}
	deleting := !claim.DeletionTimestamp.IsZero()

	before := claim.DeepCopy()
	s := &claimScope{claim: claim}
	defer func() {
		if s.ready != nil {
			setCondition(claim, claimReady(s.ready))
		}
		if err := r.patchStatus(ctx, before, claim); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	pool, err := r.fetchPool(ctx, s)
	switch {
	case apierrors.IsNotFound(err) && deleting:
		return r.reconcileDelete(ctx, s)
	case apierrors.IsNotFound(err):
		// The pool watch brings the claim back when the pool appears.
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("fetching the pool: %w", err)
	}
	if annotations.HasPaused(pool) {
		ctrl.LoggerFrom(ctx).V(1).Info("The claim's pool is paused")
		return ctrl.Result{}, nil
	}
	if deleting {
		return r.reconcileDelete(ctx, s)
	}
	return ctrl.Result{}, r.reconcileNormal(ctx, s)
}

// reconcileNormal binds the claim: an IPAddress it already has keeps its
// address (adopt); otherwise the pool hands out an address (allocate),
// which its new IPAddress carries. Then the claim points at it.
func (r *claimReconciler) reconcileNormal(ctx context.Context, s *claimScope) error {
	claim, pool := s.claim, s.pool
	address := ipamutil.NewIPAddress(claim, pool)
	var owner client.Object = pool
	if poolref.Adopted(claim.Spec.PoolRef) {
		// The adopted pool's IPAddresses name it, as those its provider
		// made do: CAPI's webhook keeps their spec as it is.
		address.Spec.PoolRef = claim.Spec.PoolRef
		owner = adoptedPoolOwner(pool)
	}
	err := r.client.Get(ctx, client.ObjectKeyFromObject(&address), &address)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.allocate(ctx, s, &address); err != nil {
			return fmt.Errorf("allocating the address of IPAddress %s: %w", address.Name, err)
		}
		if err := r.ownAddress(&address, claim, owner); err != nil {
			return err
		}
		stampAllocatedIn(&address, pool)
		if err := r.client.Create(ctx, &address); err != nil {
			return fmt.Errorf("creating IPAddress %s: %w", address.Name, err)
		}
		if err := r.awaitCached(ctx, &address); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("Bound the claim", "IPAddress", address.Name, "address", address.Spec.Address, "pool", klog.KObj(pool))
	case err != nil:
		return fmt.Errorf("reading IPAddress %s: %w", address.Name, err)
	default:
		if err := r.adopt(ctx, s, &address, owner); err != nil {
			return err
		}
	}
	claim.Status.AddressRef = ipamv1.IPAddressReference{Name: address.Name}
	return nil
}

// adopt binds the claim to the IPAddress it already has, and writes the
// IPAddress only if that changed it (owners, labels, DNS servers).
func (r *claimReconciler) adopt(ctx context.Context, s *claimScope, address *ipamv1.IPAddress, owner client.Object) error {
	before := address.DeepCopy()
	if err := r.adoptAddress(ctx, s, address); err != nil {
		return fmt.Errorf("adopting IPAddress %s: %w", address.Name, err)
	}
	if err := r.ownAddress(address, s.claim, owner); err != nil {
		return err
	}
	// A copy that took the pool over answers for the addresses it keeps
	// from then on, and an IPAddress made before the annotation existed
	// gets it: a restore of either is admitted into this copy.
	stampAllocatedIn(address, s.pool)
	if equality.Semantic.DeepEqual(before, address) {
		return nil
	}
	if err := r.client.Patch(ctx, address, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("updating IPAddress %s: %w", address.Name, err)
	}
	return nil
}

// awaitCached waits for a new IPAddress to reach the cache: the next
// reconcile of its claim, which the claim's own status write triggers,
// must find it there, or it would try to create it again and fail. An
// IPAddress that already existed was just read from the cache.
func (r *claimReconciler) awaitCached(ctx context.Context, address *ipamv1.IPAddress) error {
	key := client.ObjectKeyFromObject(address)
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, addressVisibleTimeout, true, func(ctx context.Context) (bool, error) {
		err := r.client.Get(ctx, key, &ipamv1.IPAddress{})
		return err == nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("waiting for IPAddress %s to reach the cache: %w", address.Name, err)
	}
	return nil
}

// reconcileDelete releases the address of a deleting claim that no other
// controller's finalizer keeps: one (a PacketMachine's ip-claim-protection)
// says its consumer still uses the address, which must not go to another
// claim until it lets go; the claim is then gone once it does, and the
// address reconciler releases the address it leaves. The garbage
// collector's finalizers of a foreground or orphaning deletion are not
// waited for: the collector removes them only once the claim's IPAddress,
// which this release deletes, is gone or let go. The release finalizer of
// earlier versions goes last.
func (r *claimReconciler) reconcileDelete(ctx context.Context, s *claimScope) (ctrl.Result, error) {
	claim := s.claim
	if others := slices.DeleteFunc(slices.Clone(claim.Finalizers), func(f string) bool {
		return f == ipamutil.ReleaseAddressFinalizer || f == metav1.FinalizerDeleteDependents || f == metav1.FinalizerOrphanDependents
	}); len(others) > 0 {
		ctrl.LoggerFrom(ctx).V(1).Info("Keeping the address while other finalizers protect the claim", "finalizers", others)
		return ctrl.Result{}, nil
	}
	res, err := r.releaseAddress(ctx, s)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("releasing the address: %w", err)
	}
	if res != nil && res.RequeueAfter > 0 {
		return *res, nil
	}
	patch := client.MergeFrom(claim.DeepCopy())
	if controllerutil.RemoveFinalizer(claim, ipamutil.ReleaseAddressFinalizer) {
		if err := r.client.Patch(ctx, claim, patch); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	return ctrl.Result{}, nil
}

// patchStatus writes what the reconcile changed in the claim's status,
// conditions and addressRef together, in one PATCH that fails on a conflict
// rather than overwrite a newer status. A claim that is gone has nothing to
// write.
func (r *claimReconciler) patchStatus(ctx context.Context, before, claim *ipamv1.IPAddressClaim) error {
	if equality.Semantic.DeepEqual(before.Status, claim.Status) {
		return nil
	}
	patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	if err := r.client.Status().Patch(ctx, claim, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("writing the claim's status: %w", err)
	}
	return nil
}

// ownAddress makes the IPAddress what the contract asks for: owned by its
// claim (controller) and its pool, both blocking deletion, labelled with the
// claim's Cluster, and protected by its finalizer while its claim lives.
func (r *claimReconciler) ownAddress(address *ipamv1.IPAddress, claim *ipamv1.IPAddressClaim, pool client.Object) error {
	if err := controllerutil.SetControllerReference(claim, address, r.scheme); err != nil {
		return fmt.Errorf("owning IPAddress %s by its claim: %w", address.Name, err)
	}
	notController := func(ref *metav1.OwnerReference) { ref.Controller = ptr.To(false) }
	if err := controllerutil.SetOwnerReference(pool, address, r.scheme, notController, controllerutil.WithBlockOwnerDeletion(true)); err != nil {
		return fmt.Errorf("owning IPAddress %s by its pool: %w", address.Name, err)
	}
	if address.Labels == nil {
		address.Labels = map[string]string{}
	}
	if cluster, ok := claim.Labels[clusterv1.ClusterNameLabel]; ok {
		address.Labels[clusterv1.ClusterNameLabel] = cluster
	}
	// The IPAddress is the allocating manager's: its shard is the pool's
	// (see inShard), which the claim's own label may not be.
	if r.watchFilterValue != "" {
		address.Labels[clusterv1.WatchLabel] = r.watchFilterValue
	} else if shard, ok := claim.Labels[clusterv1.WatchLabel]; ok {
		address.Labels[clusterv1.WatchLabel] = shard
	}
	controllerutil.AddFinalizer(address, ipamutil.ProtectAddressFinalizer)
	return nil
}

// inShard reports whether this manager serves the claim. With a watch
// filter, a claim belongs to the shard of its pool: the manager whose
// filter the pool's label names is the only one allocating from the pool,
// for claims of every shard (a GlobalMetalVRFIPPool serves Clusters of
// several), so no two managers hand out the pool's addresses. The claim's
// own label decides only while its pool does not exist, so that one
// manager says the pool is missing. A claim of an in-cluster pool is
// served only once the pool is adopted (adoptionServes).
func (r *claimReconciler) inShard(ctx context.Context, claim *ipamv1.IPAddressClaim) (bool, error) {
	// Another provider's claim is never served nor written, even if a
	// request names it: the cache keeps only its identity and its pool
	// reference (manager.compactClaimsAndAddresses).
	key, ok := poolref.For(claim.Spec.PoolRef, claim.Namespace)
	if !ok {
		return false, nil
	}
	if poolref.Adopted(claim.Spec.PoolRef) {
		// An in-cluster pool's claim is the in-cluster provider's until
		// its pool is adopted: not even a finalizer is written before.
		if served, err := adoptionServes(ctx, r.client, claim.Spec.PoolRef, claim.Namespace); !served || err != nil {
			return false, err
		}
	}
	if r.watchFilterValue == "" {
		return true, nil
	}
	pool, _ := poolref.New(key.Kind)
	err := r.client.Get(ctx, key.ObjectKey(), pool)
	switch {
	case apierrors.IsNotFound(err):
		return claim.Labels[clusterv1.WatchLabel] == r.watchFilterValue, nil
	case err != nil:
		return false, fmt.Errorf("reading the claim's pool %s: %w", key.Name, err)
	}
	return pool.GetLabels()[clusterv1.WatchLabel] == r.watchFilterValue, nil
}

// shardEvents passes the events of this manager's shard: a claim's when
// inShard says so, a pool's and an IPAddress's when they carry the watch
// filter label. A Cluster's events all pass: claims of another shard's
// Cluster may be this shard's, and Reconcile asks inShard.
func (r *claimReconciler) shardEvents() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(obj client.Object) bool {
		if r.watchFilterValue == "" {
			return true
		}
		switch obj := obj.(type) {
		case *clusterv1.Cluster:
			return true
		case *ipamv1.IPAddressClaim:
			ours, err := r.inShard(context.Background(), obj)
			return ours || err != nil
		default:
			return obj.GetLabels()[clusterv1.WatchLabel] == r.watchFilterValue
		}
	})
}

// waitForCluster reports whether the claim must wait for its Cluster: while
// the Cluster is paused, and while it does not exist, unless the claim is
// being deleted (a Cluster deleted before its claims must not strand them).
func (r *claimReconciler) waitForCluster(ctx context.Context, claim *ipamv1.IPAddressClaim) (bool, error) {
	name := clusterName(claim)
	if name == "" {
		return false, nil
	}
	cluster, err := util.GetClusterByName(ctx, r.client, claim.Namespace, name)
	switch {
	case apierrors.IsNotFound(err):
		if claim.DeletionTimestamp.IsZero() {
			ctrl.LoggerFrom(ctx).Info("Waiting for the claim's Cluster to exist", "Cluster", name)
			return true, r.reportNoCluster(ctx, claim, name)
		}
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading the claim's Cluster %s: %w", name, err)
	case annotations.IsPaused(cluster, cluster):
		ctrl.LoggerFrom(ctx).V(1).Info("The claim's Cluster is paused", "Cluster", name)
		return true, nil
	}
	return false, nil
}

// reportNoCluster says in the claim's Ready condition that its Cluster does
// not exist: the Cluster watch brings the claim back when it appears.
func (r *claimReconciler) reportNoCluster(ctx context.Context, claim *ipamv1.IPAddressClaim, name string) error {
	field := "spec.clusterName"
	if claim.Spec.ClusterName == "" {
		field = "label " + clusterv1.ClusterNameLabel
	}
	before := claim.DeepCopy()
	setCondition(claim, claimReady(clusterMissing{field, name, claim.Namespace}))
	return r.patchStatus(ctx, before, claim)
}

// clusterName is the claim's Cluster: spec.clusterName, or else its
// cluster-name label.
func clusterName(claim *ipamv1.IPAddressClaim) string {
	if claim.Spec.ClusterName != "" {
		return claim.Spec.ClusterName
	}
	return claim.Labels[clusterv1.ClusterNameLabel]
}
