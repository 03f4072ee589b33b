package controllers

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
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

	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/pkg/ipamutil"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/records"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// orphanRetiredReason is the event of an IPAddress deleted without its
// claim while its address stays out of use.
const orphanRetiredReason = "AddressRetired"

// addressReconciler looks after the IPAddresses of our pools that no claim
// reconcile reaches, as clusterctl move leaves them:
//
//   - An IPAddress whose owner reference to its pool carries another UID
//     (move rebuilds owner references from the UIDs it created, and a global
//     pool that existed already on the target is not one of them) is
//     pointed at the pool it names.
//   - An IPAddress whose claim is gone (a claim has no finalizer of ours:
//     this is how every claim's address is released; move deletes the
//     claims of a global pool's IPAddresses and leaves the IPAddresses) is
//     deleted. The address of a global
//     pool whose Cluster move took lives on in another management cluster,
//     so it stays out of use here (registry.Retire, see clusterMoved); any
//     other, as one of a namespaced pool, which moves whole, is freed.
//
// Both wait while the IPAddress's Cluster is paused, as during a move, or
// its pool, as during a restore.
type addressReconciler struct {
	client   client.Client
	reader   client.Reader
	registry *registry.Registry
	releases *releases
	recorder events.EventRecorder
	// gone are the claims known deleted (see goneClaims).
	gone *goneClaims
	// unbound hands a deleted claim that was never bound to the reaper.
	unbound func(pool poolref.Key, claim registry.Claim)
}

func (r *addressReconciler) setupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	ours := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		address, ok := obj.(*ipamv1.IPAddress)
		if !ok {
			return false
		}
		_, ok = poolref.For(address.Spec.PoolRef, address.Namespace)
		return ok
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("ipaddress").
		For(&ipamv1.IPAddress{}, builder.WithPredicates(ours)).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.addressesOfCluster), builder.WithPredicates(clusterUnpaused())).
		Watches(&ipamv1.IPAddressClaim{}, handler.EnqueueRequestsFromMapFunc(r.addressOfClaim), builder.WithPredicates(deletedOnly())).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), ctrl.LoggerFrom(ctx), opts.WatchFilterValue)).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Concurrency}).
		Complete(r)
}

// Reconcile checks one IPAddress's pool owner reference and claim.
func (r *addressReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	address := &ipamv1.IPAddress{}
	if err := r.client.Get(ctx, req.NamespacedName, address); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	key, ok := poolref.For(address.Spec.PoolRef, address.Namespace)
	if !ok {
		return ctrl.Result{}, nil
	}
	if poolref.Adopted(address.Spec.PoolRef) {
		if served, err := adoptionServes(ctx, r.client, address.Spec.PoolRef, address.Namespace); !served || err != nil {
			return ctrl.Result{}, err
		}
	}
	if paused, err := r.clusterPaused(ctx, address); paused || err != nil {
		return ctrl.Result{}, err
	}
	pool, _ := poolref.New(key.Kind)
	if err := r.client.Get(ctx, key.ObjectKey(), pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	pool.GetObjectKind().SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(key.Kind))
	if annotations.HasPaused(pool) {
		// A restore in progress (docs/reliability.md, "Backup and
		// restore"): the IPAddress may come before its claim, or name the
		// claim's UID in the backup; neither makes it an orphan yet.
		return ctrl.Result{}, nil
	}

	orphan, claim, err := r.orphaned(ctx, address)
	if err != nil || !orphan {
		if err == nil {
			err = r.ownedByPool(ctx, address, pool)
		}
		return ctrl.Result{}, err
	}
	if address.DeletionTimestamp.IsZero() || controllerutil.ContainsFinalizer(address, ipamutil.ProtectAddressFinalizer) {
		hold, err := r.dropOrphan(ctx, address, pool, claim)
		return ctrl.Result{RequeueAfter: hold}, err
	}
	return ctrl.Result{}, nil
}

// orphaned reports whether the IPAddress's claim is gone, or is another
// claim of the same name, and names the claim the address was handed out
// to. The cache may not have seen a claim created just before its
// IPAddress (as move creates them): a claim missing from it is looked up
// in the API server.
//
// A claim whose UID the owner reference names and that is known gone (its
// deletion event came, or an earlier pass read it live) is not read again.
func (r *addressReconciler) orphaned(ctx context.Context, address *ipamv1.IPAddress) (bool, registry.Claim, error) {
	owner := records.AddressClaim(address)
	_, known := records.ClaimUID(address)
	if known && r.gone.has(owner.UID) {
		return true, owner, nil
	}
	claim := &ipamv1.IPAddressClaim{}
	key := client.ObjectKey{Namespace: address.Namespace, Name: address.Spec.ClaimRef.Name}
	err := r.client.Get(ctx, key, claim)
	live := false
	if apierrors.IsNotFound(err) {
		err, live = r.reader.Get(ctx, key, claim), true
	}
	switch {
	case apierrors.IsNotFound(err):
		if known {
			r.gone.add(owner.UID)
		}
		return true, owner, nil
	case err != nil:
		return false, owner, fmt.Errorf("reading claim %s: %w", key.Name, err)
	}
	orphan := known && claim.UID != owner.UID
	if orphan && live {
		r.gone.add(owner.UID)
	}
	return orphan, owner, nil
}

// dropOrphan deletes an IPAddress without its claim. The address of a global
// pool whose Cluster moved away is retired first, so that it is never free
// here while the IPAddress is gone; any other is freed once the API server
// confirms the IPAddress gone: another controller's finalizer may keep it a
// while.
func (r *addressReconciler) dropOrphan(ctx context.Context, address *ipamv1.IPAddress, pool v1alpha1.Pool, claim registry.Claim) (hold time.Duration, err error) {
	ip, err := netip.ParseAddr(address.Spec.Address)
	if err != nil {
		return 0, nil // CAPI's webhook validates addresses: not one of ours
	}
	if _, named := records.ClaimUID(address); !named {
		// The garbage collector stripped the owner reference to the
		// deleted claim: the record names the UID it had.
		claim.UID = ""
	}
	moved := false
	if poolref.KindOf(pool) == v1alpha1.GlobalMetalVRFIPPoolKind {
		if moved, err = r.clusterMoved(ctx, address, claim); err != nil {
			return 0, err
		}
	}
	if !moved {
		return r.dropAndRelease(ctx, address, pool, r.registry.HolderOf(poolref.KeyOf(pool), claim, ip))
	}
	retired, err := r.registry.Retire(ctx, pool, claim, ip)
	if err != nil {
		return 0, err // retried with backoff: a VRF pool's records come once its VRF is read
	}
	patch := client.MergeFrom(address.DeepCopy())
	if controllerutil.RemoveFinalizer(address, ipamutil.ProtectAddressFinalizer) {
		if err := r.client.Patch(ctx, address, patch); err != nil {
			return 0, client.IgnoreNotFound(err)
		}
	}
	if err := r.client.Delete(ctx, address, client.Preconditions{UID: &address.UID}); client.IgnoreNotFound(err) != nil {
		return 0, fmt.Errorf("deleting IPAddress %s: %w", address.Name, err)
	}
	if retired {
		r.recorder.Eventf(pool, address, corev1.EventTypeNormal, orphanRetiredReason, "Retire",
			"IPAddress %s/%s lost its claim and its Cluster (clusterctl move); deleted it and keep %s out of use", address.Namespace, address.Name, ip)
	}
	r.releases.counted(ctx, poolref.KeyOf(pool))
	return 0, nil
}

// dropAndRelease deletes the IPAddress and keeps the provider's finalizer on
// it until it is the last one and the pool's reuse grace period has passed
// since the deletion (hold: when to look again): only then is it removed,
// and the address freed once a live read shows the IPAddress gone. Each
// change of the IPAddress (its deletion, another finalizer removed) brings
// the next step.
func (r *addressReconciler) dropAndRelease(ctx context.Context, address *ipamv1.IPAddress, pool v1alpha1.Pool, claim registry.Claim) (hold time.Duration, err error) {
	if address.DeletionTimestamp.IsZero() {
		err := r.client.Delete(ctx, address, client.Preconditions{UID: &address.UID})
		if client.IgnoreNotFound(err) != nil {
			return 0, fmt.Errorf("deleting IPAddress %s: %w", address.Name, err)
		}
		return 0, nil
	}
	if len(address.Finalizers) > 1 {
		return 0, nil // another controller's finalizer holds it
	}
	if hold := reuseHold(pool, address.DeletionTimestamp); hold > 0 {
		ctrl.LoggerFrom(ctx).Info("Holding the address for the pool's reuse grace period", "remaining", hold.Round(time.Second))
		return hold, nil
	}
	// The optimistic lock fails the patch if a finalizer was added meanwhile.
	patch := client.MergeFromWithOptions(address.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(address, ipamutil.ProtectAddressFinalizer)
	if err := r.client.Patch(ctx, address, patch); client.IgnoreNotFound(err) != nil {
		return 0, fmt.Errorf("removing the finalizer of IPAddress %s: %w", address.Name, err)
	}
	err = r.reader.Get(ctx, client.ObjectKeyFromObject(address), &ipamv1.IPAddress{})
	switch {
	case err == nil:
		return 0, fmt.Errorf("IPAddress %s still exists after its last finalizer was removed", address.Name)
	case !apierrors.IsNotFound(err):
		return 0, fmt.Errorf("reading IPAddress %s: %w", address.Name, err)
	}
	gained, err := r.registry.Release(ctx, poolref.KeyOf(pool), claim)
	if err != nil {
		return 0, err
	}
	r.releases.releasedAll(ctx, poolref.KeyOf(pool), gained)
	r.gone.forget(claim.UID)
	return 0, nil
}

// ownedByPool points the IPAddress's owner reference to its pool at the
// pool's UID.
func (r *addressReconciler) ownedByPool(ctx context.Context, address *ipamv1.IPAddress, pool v1alpha1.Pool) error {
	patch := client.MergeFrom(address.DeepCopy())
	changed := false
	for i, ref := range address.OwnerReferences {
		if ref.Kind == poolref.KindOf(pool) && ref.Name == pool.GetName() && ref.UID != pool.GetUID() &&
			ref.APIVersion == v1alpha1.GroupVersion.String() {
			address.OwnerReferences[i].UID = pool.GetUID()
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return client.IgnoreNotFound(r.client.Patch(ctx, address, patch))
}

// clusterMoved reports whether clusterctl move took the IPAddress's claim
// and its Cluster: the claim's webhook marked the IPAddress
// (v1alpha1.MovedAnnotation, which only the manager and users with the
// assign verb can write) as move deleted the claim, and the Cluster the
// IPAddress is labelled with is gone (move deletes it last, while Reconcile
// waits on the paused Cluster). Both hold after a restart and whatever the
// garbage collector did to owner references. Any other claim that went (a
// tenant's, however it was deleted) is not a move: its address is freed, and
// no one retires a shared pool's addresses for good without the verb. A mark
// left by a deletion that another admission then refused retires nothing
// while the Cluster lives. The cache may not have seen a Cluster just
// created: one missing from it is looked up in the API server.
func (r *addressReconciler) clusterMoved(ctx context.Context, address *ipamv1.IPAddress, claim registry.Claim) (bool, error) {
	mark, marked := address.Annotations[v1alpha1.MovedAnnotation]
	if !marked || (claim.UID != "" && mark != string(claim.UID)) {
		return false, nil
	}
	name := address.Labels[clusterv1.ClusterNameLabel]
	if name == "" {
		return false, nil // move takes a claim with its Cluster only (docs/install.md)
	}
	key := client.ObjectKey{Namespace: address.Namespace, Name: name}
	err := r.client.Get(ctx, key, &clusterv1.Cluster{})
	if apierrors.IsNotFound(err) {
		err = r.reader.Get(ctx, key, &clusterv1.Cluster{})
	}
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading Cluster %s: %w", name, err)
	}
	return false, nil
}

// clusterPaused reports whether the IPAddress's Cluster is paused.
func (r *addressReconciler) clusterPaused(ctx context.Context, address *ipamv1.IPAddress) (bool, error) {
	name := address.Labels[clusterv1.ClusterNameLabel]
	if name == "" {
		return false, nil
	}
	cluster := &clusterv1.Cluster{}
	err := r.client.Get(ctx, client.ObjectKey{Namespace: address.Namespace, Name: name}, cluster)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil && annotations.IsPaused(cluster, cluster), err
}

// addressesOfCluster maps a Cluster to the IPAddresses labelled with it.
func (r *addressReconciler) addressesOfCluster(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &ipamv1.IPAddressList{}
	if err := r.client.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingLabels{clusterv1.ClusterNameLabel: obj.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the IPAddresses of a Cluster", "Cluster", client.ObjectKeyFromObject(obj))
		return nil
	}
	requests := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return requests
}

// addressOfClaim maps a claim that is gone to the IPAddress named after it,
// and remembers the claim gone (the watch passes deletions alone, and an
// object missing from a relist was deleted too): every claim's IPAddress
// is released this way, and the release then reads no claim. An IPAddress
// created while its claim still existed (by another replica without leader
// election, whose creation raced the claim's release here, or by
// clusterctl move) is left without its claim when the claim goes, and no
// event of its own says so.
//
// A claim of ours that was never bound may hold a record no IPAddress
// names (the manager records an address before it creates the IPAddress,
// and another admission may refuse the creation): it is handed to the
// reaper, which frees such records of a gone claim after the grace period.
func (r *addressReconciler) addressOfClaim(_ context.Context, obj client.Object) []reconcile.Request {
	if claim, ok := obj.(*ipamv1.IPAddressClaim); ok {
		if pool, ours := poolref.For(claim.Spec.PoolRef, claim.Namespace); ours {
			r.gone.add(claim.UID)
			if claim.Status.AddressRef.Name == "" {
				r.unbound(pool, registry.Claim{NamespacedName: client.ObjectKeyFromObject(claim), UID: claim.UID})
			}
		}
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(obj)}}
}

// deletedOnly passes the deletion events alone.
func deletedOnly() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
