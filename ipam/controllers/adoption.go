package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	inclusterv1 "sigs.k8s.io/cluster-api-ipam-provider-in-cluster/api/v1alpha2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// DefaultAdoptionSettle is how long the claims and IPAddresses of a pool
// paused for adoption must be seen unchanged, and none half-written, before
// this provider seeds and serves it (see adoptionReconciler.quiet).
const DefaultAdoptionSettle = 2 * time.Second

// halfWrittenBound is how long a claim of a pool paused for adoption that
// has its IPAddress but not its status.addressRef (the in-cluster manager
// created the IPAddress and waits, up to 5 s, for its cache before it
// writes the claim's status) holds the adoption back. One older is taken
// as a reconcile that will not finish (the manager stopped between the two
// writes, or the claim's Cluster is paused): this provider binds it.
const halfWrittenBound = 15 * time.Second

// inClusterPool returns an empty in-cluster pool of the given kind
// (InClusterIPPool, GlobalInClusterIPPool, InClusterPrefixPool,
// GlobalInClusterPrefixPool) and the spec of its companion, read from it
// once it is filled.
func inClusterPool(kind string) (client.Object, func() v1alpha1.MetalVRFIPPoolSpec) {
	switch kind {
	case v1alpha1.GlobalInClusterIPPoolKind:
		pool := &inclusterv1.GlobalInClusterIPPool{}
		return pool, func() v1alpha1.MetalVRFIPPoolSpec { return companionSpec(pool.Spec) }
	case v1alpha1.InClusterPrefixPoolKind:
		pool := &inclusterv1.InClusterPrefixPool{}
		return pool, func() v1alpha1.MetalVRFIPPoolSpec { return companionPrefixSpec(pool.Spec) }
	case v1alpha1.GlobalInClusterPrefixPoolKind:
		pool := &inclusterv1.GlobalInClusterPrefixPool{}
		return pool, func() v1alpha1.MetalVRFIPPoolSpec { return companionPrefixSpec(pool.Spec) }
	}
	pool := &inclusterv1.InClusterIPPool{}
	return pool, func() v1alpha1.MetalVRFIPPoolSpec { return companionSpec(pool.Spec) }
}

// adoptionReconciler takes the in-cluster provider's pools of one kind
// (InClusterIPPool, GlobalInClusterIPPool, or one of their prefix
// kinds) annotated
// metal-vrf.ipam.cluster.x-k8s.io/adopt: "true" over, in this order, each
// step only once the one before succeeded:
//
//  1. It creates the pool's companion, a MetalVRFIPPool named
//     incluster-<name> (inclusterprefix-<name> for a prefix pool) in its
//     namespace (a GlobalMetalVRFIPPool for a cluster-scoped pool,
//     allocating in this management cluster) with the same addresses,
//     prefix, gateway, exclusions and reserved-address rule (a prefix
//     pool's: see companionPrefixSpec), owned by the in-cluster pool and
//     created paused: this provider's webhook and schema judge the spec here, and a refusal is
//     a Warning event on the in-cluster pool, with nothing else changed
//     (the in-cluster provider goes on serving it). From here on the
//     IPAddress webhook refuses or records every IPAddress of the pool
//     others create.
//  2. It pauses the in-cluster pool (cluster.x-k8s.io/paused, which
//     ipamutil's ClaimReconciler honours for every claim of the pool,
//     deleted or not) and notes when (PausedForAdoptionAnnotation).
//  3. Once the pool is quiet (see quiet): the in-cluster manager's
//     reconciles that read the pool unpaused have finished, it unpauses
//     the companion. Only then does the pool reconciler seed the companion
//     from the API server (its records and every IPAddress naming the
//     in-cluster pool, adopted as IPAddresses made before records), and
//     the claim reconciler serve the pool's claims (see adoptionServes),
//     the deleted ones first (see claimReconciler.unboundClaimsOf).
//
// An adoption interrupted before step 3 (the adopt annotation removed, or
// the pool unpaused by someone else) is undone: the companion, which never
// served, is deleted and the pool left to the in-cluster provider, with
// neither mark (see handBack).
type adoptionReconciler struct {
	kind   string
	client client.Client
	// reader reads live what the decisions must not take from a lagging
	// cache: whether the companion ever served, and the pool's claims and
	// IPAddresses while it settles.
	reader   client.Reader
	recorder events.EventRecorder
	// settle is the interval over which a paused pool must be seen unchanged.
	settle time.Duration
	now    func() time.Time
	// cluster is this management cluster: a global companion allocates here.
	cluster string

	mu sync.Mutex
	// seen is the last observation of each pool that settles.
	seen map[types.NamespacedName]observation
}

// observation is what quiet saw of a pool's claims and IPAddresses.
type observation struct {
	fingerprint string
	at          time.Time
}

func (r *adoptionReconciler) setupWithManager(mgr ctrl.Manager) error {
	pool, _ := inClusterPool(r.kind)
	companion, _ := poolref.New(poolref.CompanionKind(r.kind))
	return ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(r.kind) + "-adoption").
		For(pool).
		Owns(companion).
		Complete(r)
}

// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=inclusterippools;globalinclusterippools;inclusterprefixpools;globalinclusterprefixpools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=metalvrfippools;globalmetalvrfippools,verbs=create;delete

// Reconcile carries an annotated in-cluster pool's adoption one step on,
// or undoes one interrupted before it served.
func (r *adoptionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pool, specOf := inClusterPool(r.kind)
	if err := r.client.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, nil
	}
	adopt := pool.GetAnnotations()[v1alpha1.AdoptAnnotation] == "true"
	_, pausedByUs := pool.GetAnnotations()[v1alpha1.PausedForAdoptionAnnotation]
	switch {
	case !adopt && !pausedByUs:
		return ctrl.Result{}, nil
	case !adopt:
		// The annotation was removed: an adoption that never served is
		// undone; one that serves is rolled back by hand (docs/adoption.md).
		return ctrl.Result{}, r.handBack(ctx, pool, "the annotation "+v1alpha1.AdoptAnnotation+" was removed", false)
	case pausedByUs && !annotations.HasPaused(pool):
		// Someone unpaused it: the in-cluster manager serves it again, and
		// adoptionServes says no.
		return ctrl.Result{}, r.handBack(ctx, pool, "it was unpaused", true)
	}

	companion, done, err := r.ensureCompanion(ctx, pool, specOf())
	if err != nil || done {
		return ctrl.Result{}, err
	}

	if !pausedByUs {
		before := pool.DeepCopyObject().(client.Object)
		annotations.AddAnnotations(pool, map[string]string{
			clusterv1.PausedAnnotation:           "",
			v1alpha1.PausedForAdoptionAnnotation: r.now().UTC().Format(time.RFC3339),
		})
		if err := r.client.Patch(ctx, pool, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, fmt.Errorf("pausing %s %s: %w", r.kind, pool.GetName(), err)
		}
		r.recorder.Eventf(pool, nil, corev1.EventTypeNormal, "AdoptionPaused", "Adopt",
			"Paused for adoption by %s %s; served by it once its claims and IPAddresses are quiet for %s",
			poolref.KindOf(companion), companion.GetName(), r.settle)
		return ctrl.Result{RequeueAfter: r.settle}, nil
	}
	if !annotations.HasPaused(companion) {
		r.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if !companion.GetDeletionTimestamp().IsZero() {
		// A companion of an adoption undone before is still going.
		return ctrl.Result{RequeueAfter: r.settle}, nil
	}
	if wait, err := r.quiet(ctx, pool); err != nil || wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, err
	}
	before := companion.DeepCopyObject().(client.Object)
	delete(companion.GetAnnotations(), clusterv1.PausedAnnotation)
	if err := r.client.Patch(ctx, companion, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, fmt.Errorf("unpausing %s %s: %w", poolref.KindOf(companion), companion.GetName(), err)
	}
	r.forget(req.NamespacedName)
	r.recorder.Eventf(pool, nil, corev1.EventTypeNormal, "Adopted", "Adopt",
		"Served by %s %s from now on", poolref.KindOf(companion), companion.GetName())
	return ctrl.Result{}, nil
}

// ref is how the in-cluster pool's claims name it.
func (r *adoptionReconciler) ref(pool client.Object) ipamv1.IPPoolReference {
	return ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: r.kind, Name: pool.GetName()}
}

// companionKey names the companion of the in-cluster pool.
func (r *adoptionReconciler) companionKey(pool client.Object) poolref.Key {
	key, _ := poolref.For(r.ref(pool), pool.GetNamespace())
	return key
}

// handBack undoes an adoption that was interrupted (why) before its
// companion served: the companion is deleted, read live so that one just
// unpaused is never taken for one that never served, and the pool loses
// the pause and the mark (and, when it was unpaused by someone else, the
// adopt annotation, or the next reconcile would pause it again: adopting
// it again starts from the annotation). A companion that serves is left
// as it is, and the rollback is docs/adoption.md's, by hand: it holds
// records of the addresses it handed out.
func (r *adoptionReconciler) handBack(ctx context.Context, pool client.Object, why string, unpaused bool) error {
	r.forget(client.ObjectKeyFromObject(pool))
	key := r.companionKey(pool)
	companion, _ := poolref.New(key.Kind)
	err := r.reader.Get(ctx, key.ObjectKey(), companion)
	switch {
	case apierrors.IsNotFound(err):
		companion = nil
	case err != nil:
		return err
	}
	if companion != nil {
		if from, ok := poolref.AdoptedFrom(companion); !ok || from != r.ref(pool) || !metav1.IsControlledBy(companion, pool) {
			companion = nil // not ours to delete (AdoptionConflict)
		}
	}
	if companion != nil && !annotations.HasPaused(companion) {
		r.recorder.Eventf(pool, nil, corev1.EventTypeWarning, "AdoptionInterrupted", "Adopt",
			"%s %s %s after %s %s began serving it: this provider no longer serves its claims; roll back by hand (docs/adoption.md)",
			r.kind, pool.GetName(), why, key.Kind, key.Name)
		return nil
	}
	if companion != nil && companion.GetDeletionTimestamp().IsZero() {
		// The pool webhook keeps a pool whose addresses are in use: the
		// in-cluster pool's IPAddresses name the companion's key. It never
		// served, so they are the in-cluster provider's: skip that check.
		// Both writes are of the version read live, still paused.
		before := companion.DeepCopyObject().(client.Object)
		companion.GetAnnotations()[v1alpha1.SkipDeleteValidationAnnotation] = ""
		if err := r.client.Patch(ctx, companion, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("marking %s %s, which never served, for deletion: %w", key.Kind, key.Name, err)
		}
		rv := companion.GetResourceVersion()
		if err := r.client.Delete(ctx, companion, client.Preconditions{ResourceVersion: &rv}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s %s, which never served: %w", key.Kind, key.Name, err)
		}
	}
	before := pool.DeepCopyObject().(client.Object)
	a := pool.GetAnnotations()
	delete(a, v1alpha1.PausedForAdoptionAnnotation)
	if !unpaused {
		delete(a, clusterv1.PausedAnnotation)
	} else {
		delete(a, v1alpha1.AdoptAnnotation)
	}
	pool.SetAnnotations(a)
	if err := r.client.Patch(ctx, pool, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("handing %s %s back: %w", r.kind, pool.GetName(), err)
	}
	r.recorder.Eventf(pool, nil, corev1.EventTypeWarning, "AdoptionInterrupted", "Adopt",
		"%s %s %s before %s %s served it: adoption undone, the companion deleted, the pool left to the in-cluster provider; annotate it %s=true to adopt it again",
		r.kind, pool.GetName(), why, key.Kind, key.Name, v1alpha1.AdoptAnnotation)
	return nil
}

// quiet says how long to wait before the paused pool may be served, 0 when
// it may now: its claims and IPAddresses, read live, were seen the same
// twice, settle apart, with no claim half-written (an IPAddress named
// after a live claim that has no status.addressRef yet, younger than
// halfWrittenBound). It is what the in-cluster manager's reconciles that
// read the pool before it was paused leave behind when they are done: each
// writes the IPAddress, then the claim's status, or releases a deleted
// claim's IPAddress and then its finalizer, and a reconcile that starts
// after the pause writes nothing. It cannot see a reconcile that read the
// pool unpaused and has not written yet; what keeps that one from handing
// out an address twice is the IPAddress webhook, which since the companion
// exists refuses, or records against the companion, every IPAddress of the
// pool it did not create (docs/adoption.md).
func (r *adoptionReconciler) quiet(ctx context.Context, pool client.Object) (time.Duration, error) {
	ref := r.ref(pool)
	var opts []client.ListOption
	if poolref.CompanionKind(r.kind) == v1alpha1.MetalVRFIPPoolKind { // namespaced
		opts = append(opts, client.InNamespace(pool.GetNamespace()))
	}
	var claims ipamv1.IPAddressClaimList
	if err := r.reader.List(ctx, &claims, opts...); err != nil {
		return 0, fmt.Errorf("listing the claims of %s %s: %w", r.kind, pool.GetName(), err)
	}
	var addresses ipamv1.IPAddressList
	if err := r.reader.List(ctx, &addresses, opts...); err != nil {
		return 0, fmt.Errorf("listing the IPAddresses of %s %s: %w", r.kind, pool.GetName(), err)
	}
	now := r.now()
	var parts, halfWritten []string
	byName := map[types.NamespacedName]*ipamv1.IPAddress{}
	for i := range addresses.Items {
		a := &addresses.Items[i]
		if a.Spec.PoolRef == ref {
			byName[client.ObjectKeyFromObject(a)] = a
			parts = append(parts, "IPAddress/"+a.Namespace+"/"+a.Name+"/"+a.ResourceVersion)
		}
	}
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.Spec.PoolRef != ref {
			continue
		}
		parts = append(parts, "IPAddressClaim/"+c.Namespace+"/"+c.Name+"/"+c.ResourceVersion)
		a := byName[client.ObjectKeyFromObject(c)]
		if c.DeletionTimestamp.IsZero() && c.Status.AddressRef.Name == "" && a != nil && now.Sub(a.CreationTimestamp.Time) < halfWrittenBound {
			halfWritten = append(halfWritten, c.Namespace+"/"+c.Name)
		}
	}
	slices.Sort(parts)
	sum := sha256.Sum256([]byte(strings.Join(parts, "\n")))
	seen := observation{fingerprint: hex.EncodeToString(sum[:]), at: now}
	key := client.ObjectKeyFromObject(pool)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[types.NamespacedName]observation{}
	}
	last, had := r.seen[key]
	switch {
	case len(halfWritten) > 0:
		delete(r.seen, key)
		ctrl.LoggerFrom(ctx).Info("Waiting for the in-cluster manager to bind claims of the pool it created IPAddresses for", "claims", halfWritten)
		return r.settle, nil
	case !had || last.fingerprint != seen.fingerprint:
		r.seen[key] = seen
		return r.settle, nil
	case now.Sub(last.at) < r.settle:
		return r.settle - now.Sub(last.at), nil
	}
	delete(r.seen, key)
	return 0, nil
}

// forget drops what quiet saw of a pool.
func (r *adoptionReconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, key)
}

// ensureCompanion creates the pool's companion, or brings its spec up to
// date; done says the adoption stops here (refused, or another pool holds
// the name), which a Warning event on the in-cluster pool explains.
func (r *adoptionReconciler) ensureCompanion(ctx context.Context, pool client.Object, spec v1alpha1.MetalVRFIPPoolSpec) (v1alpha1.Pool, bool, error) {
	key := r.companionKey(pool)
	companion, _ := poolref.New(key.Kind)
	err := r.client.Get(ctx, key.ObjectKey(), companion)
	switch {
	case apierrors.IsNotFound(err):
		companion, _ = poolref.New(key.Kind)
		companion.SetNamespace(key.Namespace)
		companion.SetName(key.Name)
		companion.SetAnnotations(map[string]string{
			v1alpha1.AdoptedFromAnnotation: r.kind + "/" + pool.GetName(),
			clusterv1.PausedAnnotation:     "",
		})
		if key.Kind == v1alpha1.GlobalMetalVRFIPPoolKind {
			// Allocating here from the start, as the pool reconciler would
			// make it of a global pool that names no cluster (it stamps the
			// hand-over token's hash once the companion is unpaused).
			companion.GetAnnotations()[v1alpha1.AllocatingClusterAnnotation] = r.cluster
		}
		*companion.PoolSpec() = spec
		if cluster, ok := pool.GetLabels()[clusterv1.ClusterNameLabel]; ok {
			companion.SetLabels(map[string]string{clusterv1.ClusterNameLabel: cluster})
		}
		if err := controllerutil.SetControllerReference(pool, companion, r.client.Scheme()); err != nil {
			return nil, true, err
		}
		if err := r.client.Create(ctx, companion); err != nil {
			if apierrors.IsAlreadyExists(err) || !refused(err) {
				return nil, true, fmt.Errorf("creating %s %s: %w", key.Kind, key.Name, err)
			}
			r.refuse(pool, key, err)
			return nil, true, nil
		}
		return companion, false, nil
	case err != nil:
		return nil, true, err
	}
	if from, ok := poolref.AdoptedFrom(companion); !ok || from != r.ref(pool) || !metav1.IsControlledBy(companion, pool) {
		r.recorder.Eventf(pool, nil, corev1.EventTypeWarning, "AdoptionConflict", "Adopt",
			"%s %s exists and is not this pool's companion: rename or delete it to adopt this pool", key.Kind, key.Name)
		return nil, true, nil
	}
	if equality.Semantic.DeepEqual(*companion.PoolSpec(), spec) {
		return companion, false, nil
	}
	before := companion.DeepCopyObject().(client.Object)
	*companion.PoolSpec() = spec
	if err := r.client.Patch(ctx, companion, client.MergeFrom(before)); err != nil {
		if !refused(err) {
			return nil, true, fmt.Errorf("updating %s %s: %w", key.Kind, key.Name, err)
		}
		r.refuse(pool, key, err)
		// A paused companion (adoption not begun) stops here; one that
		// serves goes on with the spec it has, as any pool whose update
		// was refused.
		return companion, annotations.HasPaused(companion), nil
	}
	return companion, false, nil
}

func (r *adoptionReconciler) refuse(pool client.Object, companion poolref.Key, err error) {
	r.recorder.Eventf(pool, nil, corev1.EventTypeWarning, "AdoptionRefused", "Adopt",
		"%s %s refuses this pool's spec, so it is not adopted and its provider goes on serving it: %s",
		companion.Kind, companion.Name, message.Bound(err.Error()))
}

// refused reports whether the API server refused the companion for its
// content (schema, webhook), which only a change of the spec can help.
func refused(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err)
}

// companionSpec maps an InClusterIPPool's spec onto a MetalVRFIPPool's:
// the fields mean the same in both (docs/adoption.md).
func companionSpec(spec inclusterv1.InClusterIPPoolSpec) v1alpha1.MetalVRFIPPoolSpec {
	return v1alpha1.MetalVRFIPPoolSpec{
		Addresses:                      spec.Addresses,
		Prefix:                         ptr.To(int32(spec.Prefix)),
		Gateway:                        spec.Gateway,
		ExcludedAddresses:              spec.ExcludedAddresses,
		AllocateReservedIPAddresses:    spec.AllocateReservedIPAddresses,
		AddressReuseGracePeriodSeconds: spec.AddressReuseGracePeriodSeconds,
	}
}

// companionPrefixSpec maps an InClusterPrefixPool's spec onto a
// MetalVRFIPPool's in prefix mode: each of its prefixes a subnet of the
// companion (they need not share one, as spec.addresses would), its
// allocation length (64 when unset, its CRD's default), its excluded
// prefixes as excluded addresses (both take CIDRs, ranges and addresses).
// Its gateway is not carried: there it is only written to each IPAddress
// and keeps no prefix out, here a gateway must lie in a subnet and keeps
// its prefix out, which would refuse the bound prefix holding it.
func companionPrefixSpec(spec inclusterv1.InClusterPrefixPoolSpec) v1alpha1.MetalVRFIPPoolSpec {
	length := int32(spec.AllocationPrefixLength) //nolint:gosec // its schema bounds it to [1, 128]
	if length == 0 {
		length = 64
	}
	subnets := make([]v1alpha1.Subnet, 0, len(spec.Prefixes))
	for _, prefix := range spec.Prefixes {
		subnets = append(subnets, v1alpha1.Subnet{CIDR: prefix})
	}
	return v1alpha1.MetalVRFIPPoolSpec{
		Subnets:                subnets,
		AllocationPrefixLength: &length,
		ExcludedAddresses:      spec.ExcludedPrefixes,
	}
}

// adoptionServes reports whether this provider serves the objects of an
// in-cluster pool reference (one of namespace, or a cluster-scoped one):
// its companion exists, was made for it and serves
// (unpaused), and the in-cluster pool is still adopted and paused by this
// provider. Anything else leaves the pool to the in-cluster provider, or
// to nobody while an adoption settles.
func adoptionServes(ctx context.Context, reader client.Reader, ref ipamv1.IPPoolReference, namespace string) (bool, error) {
	key, ok := poolref.For(ref, namespace)
	if !ok || !poolref.Adopted(ref) {
		return false, nil
	}
	companion, _ := poolref.New(key.Kind)
	err := reader.Get(ctx, key.ObjectKey(), companion)
	if apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if from, ok := poolref.AdoptedFrom(companion); !ok || from != ref || annotations.HasPaused(companion) {
		return false, nil
	}
	pool, _ := inClusterPool(ref.Kind)
	if key.Namespace == "" {
		namespace = ""
	}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, pool); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	_, pausedByUs := pool.GetAnnotations()[v1alpha1.PausedForAdoptionAnnotation]
	return metav1.IsControlledBy(companion, pool) && pausedByUs && annotations.HasPaused(pool) &&
		pool.GetAnnotations()[v1alpha1.AdoptAnnotation] == "true", nil
}

// adoptedPoolOwner is the pool an adopted pool's IPAddresses are owned by:
// the in-cluster pool that controls the companion, as on those its
// provider made.
func adoptedPoolOwner(companion v1alpha1.Pool) client.Object {
	ref := metav1.GetControllerOf(companion)
	if from, ok := poolref.AdoptedFrom(companion); ref == nil || !ok || ref.Kind != from.Kind {
		return companion
	}
	owner := &metav1.PartialObjectMetadata{}
	owner.APIVersion, owner.Kind = ref.APIVersion, ref.Kind
	owner.Namespace, owner.Name, owner.UID = companion.GetNamespace(), ref.Name, ref.UID
	return owner
}
