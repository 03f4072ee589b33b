package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/internal/pacing"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// PacketClusterReconciler reconciles PacketClusters: the cluster's
// control-plane endpoint (the user's, a VIP it claims from an IPAM pool, or
// a public IPv4 address it reserves) and its failure domains, then CAPI's
// initialization.provisioned.
//
//	reconcileNormal
//	  reconcileEndpoint  the user's endpoint, the VIP's claim (KUBE_VIP with
//	                     spec.vip), or a reservation adopted by tag or made
//	reconcileDelete
//	  releaseEndpoint    the reservation, followed until the platform has none
//	  releaseVIP         the VIP's claim, followed until it is gone
//	  removeFinalizer
type PacketClusterReconciler struct {
	Client client.Client
	// APIReader reads Secrets uncached.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// WatchFilterValue shards by the cluster.x-k8s.io/watch-filter label.
	WatchFilterValue string
	// Credentials gives the Metal client of a cluster.
	Credentials *metal.ClientCache
	// Getenv reads the manager's environment for the fallback credentials.
	Getenv func(string) string

	// ipamInstalled is false when the cluster had no IPAddressClaim API at
	// start: a PacketCluster with spec.vip then says so in a condition.
	ipamInstalled bool
	// gate spaces the retries of failed Metal calls, per PacketCluster.
	gate *pacing.Gate
}

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=packetclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=packetclusters/status,verbs=get;update;patch

// SetupWithManager registers the reconciler. A Cluster's creation, pause
// and unpause wake its PacketCluster: one labelled with its cluster's name
// before the Cluster exists waits for it. The VIP's claim is watched
// through its controller owner reference, so its binding and its deletion
// wake the PacketCluster.
func (r *PacketClusterReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	log := ctrl.LoggerFrom(ctx)
	r.gate = pacing.NewGate(minPoll, retryMax)
	b := ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.PacketCluster{}).
		WithOptions(options).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(
			util.ClusterToInfrastructureMapFunc(ctx, infrav1.GroupVersion.WithKind("PacketCluster"), mgr.GetClient(), &infrav1.PacketCluster{})),
			builder.WithPredicates(predicates.Any(mgr.GetScheme(), log,
				predicates.ClusterCreateNotPaused(mgr.GetScheme(), log),
				predicates.ClusterPausedTransitions(mgr.GetScheme(), log))))
	_, err := mgr.GetRESTMapper().RESTMapping(ipamv1.GroupVersion.WithKind("IPAddressClaim").GroupKind(), ipamv1.GroupVersion.Version)
	switch {
	case err == nil:
		r.ipamInstalled = true
		b = b.Owns(&ipamv1.IPAddressClaim{})
	case !meta.IsNoMatchError(err):
		return err
	}
	return b.Complete(r)
}

// Reconcile brings a PacketCluster one step closer to its spec.
func (r *PacketClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pc := &infrav1.PacketCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, pc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	ctx, cluster, stop, err := startReconcile(ctx, r.Client, pc, infrav1.ClusterFinalizer)
	if stop || err != nil {
		return ctrl.Result{}, err
	}
	s := &clusterScope{PacketCluster: pc, Cluster: cluster}
	return patched(ctx, r.Client, pc, clusterOwnedConditions, s.setStatus, func() (ctrl.Result, error) {
		if !pc.DeletionTimestamp.IsZero() {
			return r.reconcileDelete(ctx, s)
		}
		if cluster == nil {
			ctrl.LoggerFrom(ctx).Info("Waiting for the Cluster controller to set the cluster-name label")
			return ctrl.Result{}, nil
		}
		return r.reconcileNormal(ctx, s)
	})
}

// reconcileNormal publishes the failure domains, which need nothing from
// the platform, then runs the phases.
func (r *PacketClusterReconciler) reconcileNormal(ctx context.Context, s *clusterScope) (ctrl.Result, error) {
	s.PacketCluster.Status.FailureDomains = failureDomains(s.PacketCluster)
	s.turn = r.gate.Begin(s.PacketCluster.UID, false)
	defer s.turn.End()
	return runPhases(ctx, s, &s.run, []phase[*clusterScope]{
		r.reconcileEndpoint,
	})
}

// reconcileDelete releases the endpoint's reservation and the VIP's claim,
// then lets the PacketCluster go.
func (r *PacketClusterReconciler) reconcileDelete(ctx context.Context, s *clusterScope) (ctrl.Result, error) {
	s.deleting = true
	s.turn = r.gate.Begin(s.PacketCluster.UID, true)
	defer s.turn.End()
	return runPhases(ctx, s, &s.run, []phase[*clusterScope]{
		r.releaseEndpoint,
		r.releaseVIP,
		r.removeClusterFinalizer,
	})
}

// removeClusterFinalizer lets the PacketCluster go, once nothing of it is
// left on the platform; the deferred patch writes it.
func (r *PacketClusterReconciler) removeClusterFinalizer(_ context.Context, s *clusterScope) (ctrl.Result, bool, error) {
	controllerutil.RemoveFinalizer(s.PacketCluster, infrav1.ClusterFinalizer)
	return ctrl.Result{}, true, nil
}

// metal returns the executor of the cluster's Metal side in its project,
// reading the credentials once per reconcile.
func (r *PacketClusterReconciler) metal(ctx context.Context, s *clusterScope) (*device.Executor, error) {
	if s.executor == nil {
		pc := s.PacketCluster
		creds := credentials{reader: r.APIReader, cache: r.Credentials, getenv: r.Getenv}
		c, source, err := creds.client(ctx, pc.Namespace, pc)
		if err != nil {
			return nil, err
		}
		s.executor, s.source = &device.Executor{API: c.InProject(pc.Spec.ProjectID)}, source
	}
	return s.executor, nil
}
