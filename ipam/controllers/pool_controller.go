package controllers

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// poolDeletingReason: the pool waits for its addresses to be released before it goes.
const poolDeletingReason = "Deleting"

// poolReconciler keeps a pool's status (counts, Ready, Paused) and holds its
// deletion until no address of it is in use. One instance serves one kind.
type poolReconciler struct {
	client   client.Client
	registry *registry
	recorder record.EventRecorder
	releases *releases
	kind     string
}

func (r *poolReconciler) setupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	pool, _ := poolref.New(r.kind)
	return ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(r.kind)).
		For(pool).
		Watches(&ipamv1.IPAddress{}, handler.EnqueueRequestsFromMapFunc(r.poolOfAddress)).
		WatchesRawSource(r.releases.poolSource(r.kind)).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), ctrl.LoggerFrom(ctx), opts.WatchFilterValue)).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Concurrency}).
		Complete(r)
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
	defer func() {
		if err := patchHelper.Patch(ctx, pool, patch.WithOwnedConditions{Conditions: []string{v1alpha1.ReadyCondition}}); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	if !pool.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, pool)
	}
	return ctrl.Result{}, r.reconcileNormal(ctx, pool)
}

func (r *poolReconciler) reconcileNormal(ctx context.Context, pool v1alpha1.Pool) error {
	controllerutil.AddFinalizer(pool, v1alpha1.ProtectPoolFinalizer)

	stats, err := r.registry.stats(ctx, pool)
	if err != nil {
		return err
	}
	wasExhausted := conditions.GetReason(pool, v1alpha1.ReadyCondition) == v1alpha1.ExhaustedReason
	r.publish(pool, stats)

	switch {
	case stats.SpaceErr != nil:
		r.setReady(pool, metav1.ConditionFalse, v1alpha1.InvalidSpecReason, stats.SpaceErr.Error())
	case stats.Free.Sign() == 0:
		r.setReady(pool, metav1.ConditionFalse, v1alpha1.ExhaustedReason,
			fmt.Sprintf("All %s addresses are in use; waiting claims are served as addresses are released", stats.Total))
		if !wasExhausted {
			r.recorder.Eventf(pool, corev1.EventTypeWarning, v1alpha1.ExhaustedReason, "All %s addresses are in use", stats.Total)
		}
	default:
		r.setReady(pool, metav1.ConditionTrue, v1alpha1.ReadyReason,
			fmt.Sprintf("%s of %s addresses free", stats.Free, stats.Total))
	}
	pool.PoolStatus().ObservedGeneration = pool.GetGeneration()
	return nil
}

// reconcileDelete lets the pool go once none of its addresses is in use, or
// at once when clusterctl move (or an admin, with the skip annotation) says
// the addresses live on elsewhere.
func (r *poolReconciler) reconcileDelete(ctx context.Context, pool v1alpha1.Pool) error {
	stats, err := r.registry.stats(ctx, pool)
	if err != nil {
		return err
	}
	if stats.Used > 0 && !deletionForced(pool) {
		r.setReady(pool, metav1.ConditionFalse, poolDeletingReason,
			fmt.Sprintf("Waiting for %d IPAddresses to be released before the pool is deleted", stats.Used))
		return nil
	}
	r.registry.forget(pool)
	poolAddresses.DeletePartialMatch(map[string]string{"kind": r.kind, "namespace": pool.GetNamespace(), "name": pool.GetName()})
	controllerutil.RemoveFinalizer(pool, v1alpha1.ProtectPoolFinalizer)
	return nil
}

// publish writes the counts to status and to the pool gauges.
func (r *poolReconciler) publish(pool v1alpha1.Pool, stats poolStats) {
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
	} {
		poolAddresses.WithLabelValues(r.kind, pool.GetNamespace(), pool.GetName(), state).Set(value)
	}
}

func (r *poolReconciler) setReady(pool v1alpha1.Pool, status metav1.ConditionStatus, reason, message string) {
	conditions.Set(pool, metav1.Condition{
		Type:               v1alpha1.ReadyCondition,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: pool.GetGeneration(),
	})
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

// poolOfAddress maps an IPAddress to its pool, when the pool is of this kind.
func (r *poolReconciler) poolOfAddress(_ context.Context, obj client.Object) []reconcile.Request {
	address, ok := obj.(*ipamv1.IPAddress)
	if !ok {
		return nil
	}
	key, ok := poolref.For(address.Spec.PoolRef, address.Namespace)
	if !ok || key.Kind != r.kind {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key.ObjectKey()}}
}

// deletionForced reports whether the pool may go with addresses in use.
func deletionForced(pool v1alpha1.Pool) bool {
	_, skip := pool.GetAnnotations()[v1alpha1.SkipDeleteValidationAnnotation]
	_, move := pool.GetAnnotations()[clusterctlv1.DeleteForMoveAnnotation]
	return skip || move
}
