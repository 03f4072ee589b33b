package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipampredicates "sigs.k8s.io/cluster-api-ipam-provider-in-cluster/pkg/predicates"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// This file says what wakes a claim.

// unboundClaimsByPool indexes claims that wait for an address by the pool
// they wait on, so freeing an address wakes exactly those claims.
const unboundClaimsByPool = "metal-vrf.ipam/unbound-claims-by-pool"

// claimsByCluster indexes claims by the name of their Cluster, so that a
// Cluster that unpauses or appears wakes exactly its claims.
const claimsByCluster = "metal-vrf.ipam/claims-by-cluster"

// setupWithManager adds the claim watches: claims of our pool kinds (of
// this shard, with an unpaused Cluster), their IPAddresses, a Cluster that
// unpauses or appears, and the two wake-ups for claims that wait for an
// address (a pool that may serve them now, see poolWakesClaims, and an
// address that was released).
func (r *claimReconciler) setupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &ipamv1.IPAddressClaim{}, claimsByCluster, indexClaimCluster); err != nil {
		return fmt.Errorf("indexing claims by Cluster: %w", err)
	}
	ourKinds := func(refersTo func(metav1.GroupKind) predicate.Funcs) predicate.Predicate {
		return predicate.Or(
			refersTo(metav1.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind}),
			refersTo(metav1.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.GlobalMetalVRFIPPoolKind}),
			// Served only once adopted: Reconcile asks adoptionServes.
			refersTo(metav1.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.InClusterIPPoolKind}),
			refersTo(metav1.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.GlobalInClusterIPPoolKind}),
			refersTo(metav1.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.InClusterPrefixPoolKind}),
			refersTo(metav1.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.GlobalInClusterPrefixPoolKind}),
		)
	}
	wakeWaiting := handler.EnqueueRequestsFromMapFunc(r.unboundClaimsOf)

	return ctrl.NewControllerManagedBy(mgr).
		WithEventFilter(predicates.ResourceNotPaused(mgr.GetScheme(), ctrl.LoggerFrom(ctx))).
		WithEventFilter(r.shardEvents()).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.claimsOfCluster), builder.WithPredicates(clusterUnpaused())).
		For(&ipamv1.IPAddressClaim{}, builder.WithPredicates(ourKinds(ipampredicates.ClaimReferencesPoolKind))).
		Owns(&ipamv1.IPAddress{}, builder.WithPredicates(ourKinds(ipampredicates.AddressReferencesPoolKind))).
		Watches(&v1alpha1.MetalVRFIPPool{}, wakeWaiting, builder.WithPredicates(poolWakesClaims())).
		Watches(&v1alpha1.GlobalMetalVRFIPPool{}, wakeWaiting, builder.WithPredicates(poolWakesClaims())).
		WatchesRawSource(r.releases.claimSource(wakeWaiting)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.concurrency}).
		Complete(r)
}

// unboundClaimsOf maps a pool to the claims waiting on it, and the
// companion of an adopted in-cluster pool that serves (unpaused) also to
// the claims of that pool being deleted: those deleted while the pool was
// paused for adoption waited for it, as no other event brings them back.
func (r *claimReconciler) unboundClaimsOf(ctx context.Context, obj client.Object) []reconcile.Request {
	pool, ok := obj.(v1alpha1.Pool)
	if !ok {
		return nil
	}
	key := poolref.KeyOf(pool).String()
	requests := claimRequests(ctx, r.client, "the claims waiting on pool "+key, client.MatchingFields{unboundClaimsByPool: key})
	if from, adopted := poolref.AdoptedFrom(pool); adopted && !annotations.HasPaused(pool) {
		requests = append(requests, deletingClaimsOf(ctx, r.client, from, pool.GetNamespace())...)
	}
	return requests
}

// deletingClaimsOf returns a request for each claim being deleted that
// names ref (in namespace, or in any for a cluster-scoped pool).
func deletingClaimsOf(ctx context.Context, reader client.Reader, ref ipamv1.IPPoolReference, namespace string) []reconcile.Request {
	var claims ipamv1.IPAddressClaimList
	if err := reader.List(ctx, &claims, client.InNamespace(namespace)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the claims being deleted of an adopted pool", "pool", ref.Name)
		return nil
	}
	var requests []reconcile.Request
	for i := range claims.Items {
		claim := &claims.Items[i]
		if claim.Spec.PoolRef == ref && !claim.DeletionTimestamp.IsZero() {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(claim)})
		}
	}
	return requests
}

// anyPool is the value under which unboundClaimsByPool also indexes every
// claim it indexes, so that the metrics read the claims that wait and no
// other; no pool key is "*".
const anyPool = "*"

// indexUnboundClaim indexes a claim of our pools that holds no address yet,
// by its pool and under anyPool.
func indexUnboundClaim(obj client.Object) []string {
	claim, ok := obj.(*ipamv1.IPAddressClaim)
	if !ok || claim.Status.AddressRef.Name != "" || !claim.DeletionTimestamp.IsZero() {
		return nil
	}
	key, ok := poolref.For(claim.Spec.PoolRef, claim.Namespace)
	if !ok {
		return nil
	}
	return []string{key.String(), anyPool}
}

// poolWakesClaims passes the pool events that may let the claims waiting
// on the pool be served: all but updates, and the updates that change its
// spec, unpause it, change what its sources gave (a status change, which
// bumps no generation) or where a global pool allocates (see
// reconcileAllocator: a take-over lets its claims be served).
func poolWakesClaims() predicate.Funcs {
	return poolUpdates(func(before, after v1alpha1.Pool) bool {
		was, is := before.GetAnnotations(), after.GetAnnotations()
		return before.GetGeneration() != after.GetGeneration() ||
			annotations.HasPaused(before) && !annotations.HasPaused(after) ||
			!equality.Semantic.DeepEqual(before.PoolStatus().Resolved, after.PoolStatus().Resolved) ||
			was[v1alpha1.AllocatingClusterAnnotation] != is[v1alpha1.AllocatingClusterAnnotation] ||
			was[v1alpha1.HandoverTokenAnnotation] != is[v1alpha1.HandoverTokenAnnotation]
	})
}

func indexClaimCluster(obj client.Object) []string {
	claim, ok := obj.(*ipamv1.IPAddressClaim)
	if !ok {
		return nil
	}
	if name := clusterName(claim); name != "" {
		return []string{name}
	}
	return nil
}

// claimsOfCluster maps a Cluster to its claims.
func (r *claimReconciler) claimsOfCluster(ctx context.Context, cluster client.Object) []reconcile.Request {
	return claimRequests(ctx, r.client, "the claims of Cluster "+client.ObjectKeyFromObject(cluster).String(),
		client.InNamespace(cluster.GetNamespace()), client.MatchingFields{claimsByCluster: cluster.GetName()})
}

// claimRequests lists the claims that match opts and returns a request for
// each; what says which claims in the log when the list fails.
func claimRequests(ctx context.Context, reader client.Reader, what string, opts ...client.ListOption) []reconcile.Request {
	var claims ipamv1.IPAddressClaimList
	if err := reader.List(ctx, &claims, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing "+what)
		return nil
	}
	requests := make([]reconcile.Request, 0, len(claims.Items))
	for i := range claims.Items {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&claims.Items[i])})
	}
	return requests
}

// clusterUnpaused passes the Cluster events that may let waiting claims go
// on: a Cluster created unpaused, one that unpauses, one deleted.
func clusterUnpaused() predicate.Funcs {
	isPaused := func(obj client.Object) bool {
		cluster, ok := obj.(*clusterv1.Cluster)
		return ok && annotations.IsPaused(cluster, cluster)
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return !isPaused(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return isPaused(e.ObjectOld) && !isPaused(e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
