package controllers

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// recordsReapedReason is the event of a claim whose pending records were reaped.
const recordsReapedReason = "PendingRecordsReaped"

// reapRequest names a claim, of a pool, that has pending records.
type reapRequest struct {
	Pool  poolref.Key
	Claim registry.Claim
}

// recordsReaper reaps the pending records of claims (see registry.Reap):
// the registry tells it of a claim that has some when it records another
// (OnPending), and it looks at the claim once the grace period has passed,
// then again until none is left.
type recordsReaper struct {
	client client.Reader
	// live reads claims past the cache.
	live     client.Reader
	registry *registry.Registry
	releases *releases
	recorder events.EventRecorder

	// mu guards queue, which the controller hands over when it starts (on
	// the leader only).
	mu    sync.Mutex
	queue workqueue.TypedRateLimitingInterface[reapRequest]
}

func (r *recordsReaper) setupWithManager(mgr ctrl.Manager) error {
	r.registry.OnPending(r.enqueue)
	return builder.TypedControllerManagedBy[reapRequest](mgr).
		Named("pendingrecords").
		WatchesRawSource(source.TypedFunc[reapRequest](func(_ context.Context, queue workqueue.TypedRateLimitingInterface[reapRequest]) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.queue = queue
			return nil
		})).
		Complete(r)
}

// enqueue has the claim looked at once the grace period has passed. Where
// the controller does not run (a replica that is not leading) it does
// nothing: the leader reaps the claim when it next records one of its
// addresses, and a claim has only so many pending records meanwhile.
func (r *recordsReaper) enqueue(pool poolref.Key, claim registry.Claim) {
	r.mu.Lock()
	queue := r.queue
	r.mu.Unlock()
	if queue != nil {
		queue.AddAfter(reapRequest{Pool: pool, Claim: claim}, r.registry.PendingGrace())
	}
}

// Reconcile reaps one claim's pending records.
func (r *recordsReaper) Reconcile(ctx context.Context, req reapRequest) (reconcile.Result, error) {
	pool, _ := poolref.New(req.Pool.Kind)
	if err := r.client.Get(ctx, req.Pool.ObjectKey(), pool); err != nil {
		// A deleted pool's claims are released, and their records with them.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	pool.GetObjectKind().SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(req.Pool.Kind))
	gone, err := r.claimGone(ctx, req.Claim)
	if err != nil {
		return reconcile.Result{}, err
	}
	reaped, err := r.registry.Reap(ctx, pool, req.Claim, gone)
	if len(reaped.Addresses) > 0 {
		recordsReapedTotal.WithLabelValues(req.Pool.Kind).Add(float64(len(reaped.Addresses)))
		ctrl.LoggerFrom(ctx).Info("Reaped the records of IPAddresses that were not created", "claim", req.Claim.NamespacedName, "addresses", reaped.Addresses)
		r.tell(ctx, req.Claim, reaped)
	}
	for _, key := range reaped.Gained {
		r.releases.released(ctx, key)
	}
	if err != nil || reaped.Pending == 0 {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: reaped.RetryAfter}, nil
}

// claimGone reports whether no claim of the claim's name and UID exists,
// read live: a claim just created may not be in the cache yet.
func (r *recordsReaper) claimGone(ctx context.Context, claim registry.Claim) (bool, error) {
	obj := &ipamv1.IPAddressClaim{}
	err := r.live.Get(ctx, claim.NamespacedName, obj)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return err == nil && obj.UID != claim.UID, err
}

// tell records an event on the claim, if it exists, naming what was reaped.
func (r *recordsReaper) tell(ctx context.Context, claim registry.Claim, reaped registry.Reaped) {
	obj := &ipamv1.IPAddressClaim{}
	if err := r.client.Get(ctx, claim.NamespacedName, obj); err != nil || obj.UID != claim.UID {
		return
	}
	r.recorder.Eventf(obj, nil, corev1.EventTypeNormal, recordsReapedReason, "Reap",
		"Freed %v, recorded for IPAddresses of the claim whose creation failed", reaped.Addresses)
}
