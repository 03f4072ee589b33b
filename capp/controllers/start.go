package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// startReconcile is what both reconcilers do before their scope: read the
// object's Cluster (by its cluster-name label), leave the object alone while
// the Cluster is paused (clusterctl move pauses it: what the object holds,
// a device, claims, an endpoint, must not be released under an object that
// lives on elsewhere, even when this copy is deleted), and give a live
// object its finalizer. Without the label, or once the Cluster is gone, there
// is nothing to be paused by. stop reports that the reconcile ends here.
func startReconcile(ctx context.Context, c client.Client, obj paused.ConditionSetter, finalizer string) (_ context.Context, _ *clusterv1.Cluster, stop bool, _ error) {
	if err := dropUpstreamConditions(ctx, c, obj); err != nil {
		return ctx, nil, true, err
	}
	cluster, err := util.GetClusterFromMetadata(ctx, c, metav1.ObjectMeta{Namespace: obj.GetNamespace(), Labels: obj.GetLabels()})
	if err != nil && !errors.Is(err, util.ErrNoCluster) && !apierrors.IsNotFound(err) {
		return ctx, nil, true, err
	}
	if cluster != nil {
		ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("Cluster", klog.KObj(cluster)))
		if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, c, cluster, obj); err != nil || isPaused || requeue {
			return ctx, cluster, true, err
		}
	}
	if obj.GetDeletionTimestamp().IsZero() {
		if finalizerAdded, err := finalizers.EnsureFinalizer(ctx, c, obj, finalizer); err != nil || finalizerAdded {
			return ctx, cluster, true, err
		}
	}
	return ctx, cluster, false, nil
}

// patched runs reconcile, then, whatever it returned, derives obj's status
// (setStatus) and patches obj, the conditions owned winning over concurrent
// writers'. A failed patch is returned with reconcile's error.
func patched(ctx context.Context, c client.Client, obj client.Object, owned []string, setStatus func(), reconcile func() (ctrl.Result, error)) (_ ctrl.Result, reterr error) {
	helper, err := patch.NewHelper(obj, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		setStatus()
		if err := helper.Patch(ctx, obj, patch.WithOwnedConditions{Conditions: owned}); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()
	return reconcile()
}

// dropUpstreamConditions removes the conditions upstream CAPP (v1beta1
// conditions) left on an object it reconciled before an upgrade: they have
// no reason, which our schema requires, so any status write carrying them
// back would be refused. Every condition this provider writes has one.
func dropUpstreamConditions(ctx context.Context, c client.Client, obj paused.ConditionSetter) error {
	current := obj.GetConditions()
	kept := slices.DeleteFunc(slices.Clone(current), func(cond metav1.Condition) bool { return cond.Reason == "" })
	if len(kept) == len(current) {
		return nil
	}
	base := obj.DeepCopyObject().(client.Object)
	obj.SetConditions(kept)
	if err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("removing the conditions upstream CAPP left: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("Removed the conditions upstream CAPP left", "count", len(current)-len(kept))
	return nil
}
