package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
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
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// unboundClaimsByPool indexes claims that wait for an address by the pool
// they wait on, so freeing an address wakes exactly those claims.
const unboundClaimsByPool = "metal-vrf.ipam/unbound-claims-by-pool"

// poolAdapter is what is particular to our pools in the claim lifecycle
// that claimReconciler drives (finalizers, owner references, the IPAddress
// object, addressRef): the claim's watches, and a claimHandler per claim.
type poolAdapter struct {
	client      client.Client
	reader      client.Reader
	recorder    events.EventRecorder
	registry    *registry.Registry
	concurrency int
	releases    *releases
}

// SetupWithManager adds the claim watches: claims of our pool kinds, their
// IPAddresses, and the two wake-ups for claims that wait for an address (a
// pool whose spec or resolved sources changed or that unpaused, and an
// address that was released).
func (a *poolAdapter) setupWithManager(b *ctrl.Builder) {
	ourKinds := func(refersTo func(metav1.GroupKind) predicate.Funcs) predicate.Predicate {
		return predicate.Or(
			refersTo(metav1.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind}),
			refersTo(metav1.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.GlobalMetalVRFIPPoolKind}),
		)
	}
	wakeWaiting := handler.EnqueueRequestsFromMapFunc(a.unboundClaimsOf)
	poolChanged := builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, unpaused(), resolvedChanged(), allocatorChanged()))

	b.For(&ipamv1.IPAddressClaim{}, builder.WithPredicates(ourKinds(ipampredicates.ClaimReferencesPoolKind))).
		Owns(&ipamv1.IPAddress{}, builder.WithPredicates(ourKinds(ipampredicates.AddressReferencesPoolKind))).
		Watches(&v1alpha1.MetalVRFIPPool{}, wakeWaiting, poolChanged).
		Watches(&v1alpha1.GlobalMetalVRFIPPool{}, wakeWaiting, poolChanged).
		WatchesRawSource(a.releases.claimSource(wakeWaiting)).
		WithOptions(controller.Options{MaxConcurrentReconciles: a.concurrency})
}

// handlerFor returns the handler for one claim.
func (a *poolAdapter) handlerFor(claim *ipamv1.IPAddressClaim) *claimHandler {
	return &claimHandler{poolAdapter: a, claim: claim}
}

// unboundClaimsOf maps a pool to the claims waiting on it.
func (a *poolAdapter) unboundClaimsOf(ctx context.Context, obj client.Object) []reconcile.Request {
	pool, ok := obj.(v1alpha1.Pool)
	if !ok {
		return nil
	}
	key := poolref.KeyOf(pool).String()
	return claimRequests(ctx, a.client, "the claims waiting on pool "+key, client.MatchingFields{unboundClaimsByPool: key})
}

// indexUnboundClaim indexes a claim of our pools that holds no address yet.
func indexUnboundClaim(obj client.Object) []string {
	claim, ok := obj.(*ipamv1.IPAddressClaim)
	if !ok || claim.Status.AddressRef.Name != "" || !claim.DeletionTimestamp.IsZero() {
		return nil
	}
	key, ok := poolref.For(claim.Spec.PoolRef, claim.Namespace)
	if !ok {
		return nil
	}
	return []string{key.String()}
}

// resolvedChanged passes updates that change what a pool's sources gave: a
// status change, which bumps no generation.
func resolvedChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			before, okBefore := e.ObjectOld.(v1alpha1.Pool)
			after, okAfter := e.ObjectNew.(v1alpha1.Pool)
			return okBefore && okAfter && !equality.Semantic.DeepEqual(before.PoolStatus().Resolved, after.PoolStatus().Resolved)
		},
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// allocatorChanged passes updates that change where a global pool
// allocates (see reconcileAllocator): a take-over lets its claims be served.
func allocatorChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			before, after := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
			return before[v1alpha1.AllocatingClusterAnnotation] != after[v1alpha1.AllocatingClusterAnnotation] ||
				before[v1alpha1.HandoverTokenAnnotation] != after[v1alpha1.HandoverTokenAnnotation]
		},
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// unpaused passes updates that remove the paused annotation.
func unpaused() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return annotations.HasPaused(e.ObjectOld) && !annotations.HasPaused(e.ObjectNew)
		},
		CreateFunc:  func(event.CreateEvent) bool { return true },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
