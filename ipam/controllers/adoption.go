package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// DefaultAdoptionSettle is how long an adopted InClusterIPPool stays paused
// before this provider seeds and serves it (see adoptionReconciler).
const DefaultAdoptionSettle = 10 * time.Second

// adoptionReconciler takes InClusterIPPools annotated
// metal-vrf.ipam.cluster.x-k8s.io/adopt: "true" over from the in-cluster
// provider, in this order, each step only once the one before succeeded:
//
//  1. It creates the pool's companion, a MetalVRFIPPool named
//     incluster-<name> with the same addresses, prefix, gateway, exclusions
//     and reserved-address rule, owned by the InClusterIPPool and created
//     paused: this provider's webhook and schema judge the spec here, and a
//     refusal is a Warning event on the InClusterIPPool, with nothing else
//     changed (the in-cluster provider goes on serving it).
//  2. It pauses the InClusterIPPool (cluster.x-k8s.io/paused, which
//     ipamutil's ClaimReconciler honours for every claim of the pool,
//     deleted or not) and notes when (PausedForAdoptionAnnotation).
//  3. After settle, which lets a reconcile of the in-cluster manager that
//     read the pool unpaused finish, it unpauses the companion. Only then
//     does the pool reconciler seed the companion from the API server (its
//     records and every IPAddress naming the InClusterIPPool, adopted as
//     IPAddresses made before records), and the claim reconciler serve the
//     pool's claims (see adoptionServes).
type adoptionReconciler struct {
	client   client.Client
	recorder events.EventRecorder
	settle   time.Duration
	now      func() time.Time
}

func (r *adoptionReconciler) setupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("inclusterippool-adoption").
		For(&inclusterv1.InClusterIPPool{}).
		Owns(&v1alpha1.MetalVRFIPPool{}).
		Complete(r)
}

// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=inclusterippools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=metalvrfippools,verbs=create

// Reconcile carries an annotated InClusterIPPool's adoption one step on.
func (r *adoptionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pool := &inclusterv1.InClusterIPPool{}
	if err := r.client.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pool.Annotations[v1alpha1.AdoptAnnotation] != "true" || !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	_, pausedByUs := pool.Annotations[v1alpha1.PausedForAdoptionAnnotation]
	if pausedByUs && !annotations.HasPaused(pool) {
		// Someone unpaused it: the in-cluster manager serves it again, and
		// adoptionServes says no. Adopting again takes the steps of
		// docs/adoption.md's rollback first.
		r.recorder.Eventf(pool, nil, corev1.EventTypeWarning, "AdoptionInterrupted", "Adopt",
			"InClusterIPPool %s was unpaused after its adoption began: this provider does not serve its claims", pool.Name)
		return ctrl.Result{}, nil
	}

	companion, done, err := r.ensureCompanion(ctx, pool)
	if err != nil || done {
		return ctrl.Result{}, err
	}

	if !pausedByUs {
		before := pool.DeepCopy()
		annotations.AddAnnotations(pool, map[string]string{
			clusterv1.PausedAnnotation:           "",
			v1alpha1.PausedForAdoptionAnnotation: r.now().UTC().Format(time.RFC3339),
		})
		if err := r.client.Patch(ctx, pool, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, fmt.Errorf("pausing InClusterIPPool %s: %w", pool.Name, err)
		}
		r.recorder.Eventf(pool, nil, corev1.EventTypeNormal, "AdoptionPaused", "Adopt",
			"Paused for adoption by MetalVRFIPPool %s; served by it in %s", companion.Name, r.settle)
		return ctrl.Result{RequeueAfter: r.settle}, nil
	}
	since, err := time.Parse(time.RFC3339, pool.Annotations[v1alpha1.PausedForAdoptionAnnotation])
	if err != nil {
		since = time.Time{}
	}
	if wait := since.Add(r.settle).Sub(r.now()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if !annotations.HasPaused(companion) {
		return ctrl.Result{}, nil
	}
	before := companion.DeepCopy()
	delete(companion.Annotations, clusterv1.PausedAnnotation)
	if err := r.client.Patch(ctx, companion, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, fmt.Errorf("unpausing MetalVRFIPPool %s: %w", companion.Name, err)
	}
	r.recorder.Eventf(pool, nil, corev1.EventTypeNormal, "Adopted", "Adopt",
		"Served by MetalVRFIPPool %s from now on", companion.Name)
	return ctrl.Result{}, nil
}

// ensureCompanion creates the pool's companion, or brings its spec up to
// date; done says the adoption stops here (refused, or another pool holds
// the name), which a Warning event on the InClusterIPPool explains.
func (r *adoptionReconciler) ensureCompanion(ctx context.Context, pool *inclusterv1.InClusterIPPool) (*v1alpha1.MetalVRFIPPool, bool, error) {
	spec := companionSpec(pool.Spec)
	companion := &v1alpha1.MetalVRFIPPool{}
	key := client.ObjectKey{Namespace: pool.Namespace, Name: poolref.CompanionName(pool.Name)}
	err := r.client.Get(ctx, key, companion)
	switch {
	case apierrors.IsNotFound(err):
		companion = &v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: key.Namespace, Name: key.Name,
				Annotations: map[string]string{
					v1alpha1.AdoptedFromAnnotation: v1alpha1.InClusterIPPoolKind + "/" + pool.Name,
					clusterv1.PausedAnnotation:     "",
				},
			},
			Spec: spec,
		}
		if cluster, ok := pool.Labels[clusterv1.ClusterNameLabel]; ok {
			companion.Labels = map[string]string{clusterv1.ClusterNameLabel: cluster}
		}
		if err := controllerutil.SetControllerReference(pool, companion, r.client.Scheme()); err != nil {
			return nil, true, err
		}
		if err := r.client.Create(ctx, companion); err != nil {
			if apierrors.IsAlreadyExists(err) || !refused(err) {
				return nil, true, fmt.Errorf("creating MetalVRFIPPool %s: %w", key.Name, err)
			}
			r.refuse(pool, key.Name, err)
			return nil, true, nil
		}
		return companion, false, nil
	case err != nil:
		return nil, true, err
	}
	if from, ok := poolref.AdoptedFrom(companion); !ok || from != pool.Name || !metav1.IsControlledBy(companion, pool) {
		r.recorder.Eventf(pool, nil, corev1.EventTypeWarning, "AdoptionConflict", "Adopt",
			"MetalVRFIPPool %s exists and is not this pool's companion: rename or delete it to adopt this pool", key.Name)
		return nil, true, nil
	}
	if equality.Semantic.DeepEqual(companion.Spec, spec) {
		return companion, false, nil
	}
	before := companion.DeepCopy()
	companion.Spec = spec
	if err := r.client.Patch(ctx, companion, client.MergeFrom(before)); err != nil {
		if !refused(err) {
			return nil, true, fmt.Errorf("updating MetalVRFIPPool %s: %w", key.Name, err)
		}
		r.refuse(pool, key.Name, err)
		// A paused companion (adoption not begun) stops here; one that
		// serves goes on with the spec it has, as any pool whose update
		// was refused.
		return companion, annotations.HasPaused(companion), nil
	}
	return companion, false, nil
}

func (r *adoptionReconciler) refuse(pool *inclusterv1.InClusterIPPool, companion string, err error) {
	r.recorder.Eventf(pool, nil, corev1.EventTypeWarning, "AdoptionRefused", "Adopt",
		"MetalVRFIPPool %s refuses this pool's spec, so it is not adopted and its provider goes on serving it: %s",
		companion, message.Bound(err.Error()))
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

// adoptionServes reports whether this provider serves the objects of an
// in-cluster pool reference: its companion exists, was made for it and
// serves (unpaused), and the InClusterIPPool is still adopted and paused
// by this provider. Anything else leaves the pool to the in-cluster
// provider, or to nobody while an adoption settles.
func adoptionServes(ctx context.Context, reader client.Reader, ref ipamv1.IPPoolReference, namespace string) (bool, error) {
	companion := &v1alpha1.MetalVRFIPPool{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: poolref.CompanionName(ref.Name)}, companion)
	if apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if from, ok := poolref.AdoptedFrom(companion); !ok || from != ref.Name || annotations.HasPaused(companion) {
		return false, nil
	}
	pool := &inclusterv1.InClusterIPPool{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, pool); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	_, pausedByUs := pool.Annotations[v1alpha1.PausedForAdoptionAnnotation]
	return metav1.IsControlledBy(companion, pool) && pausedByUs && annotations.HasPaused(pool) &&
		pool.Annotations[v1alpha1.AdoptAnnotation] == "true", nil
}

// adoptedPoolOwner is the pool an adopted pool's IPAddresses are owned by:
// the InClusterIPPool that controls the companion, as on those its
// provider made.
func adoptedPoolOwner(companion v1alpha1.Pool) client.Object {
	ref := metav1.GetControllerOf(companion)
	if ref == nil || ref.Kind != v1alpha1.InClusterIPPoolKind {
		return companion
	}
	owner := &metav1.PartialObjectMetadata{}
	owner.APIVersion, owner.Kind = ref.APIVersion, ref.Kind
	owner.Namespace, owner.Name, owner.UID = companion.GetNamespace(), ref.Name, ref.UID
	return owner
}
