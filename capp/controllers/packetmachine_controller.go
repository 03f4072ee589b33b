// Package controllers holds the CAPP reconcilers. The PacketMachine
// reconciler runs a machine through its phases in order, each one waiting
// (on a watch, never a poll) for what the next one needs:
//
//	reconcileNormal
//	  reconcileIPAddresses   one IPAddressClaim per network with addressFromPool
//	  reconcileBootstrapData bootstrap data + network configuration -> Secret
//	  (next: reconcileDevice, reconcilePorts: the device and its VLANs)
//	reconcileDelete
//	  (next: the device goes first)
//	  releaseIPAddresses     claims last, once nothing uses their addresses
package controllers

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
)

// PacketMachineReconciler reconciles PacketMachines.
type PacketMachineReconciler struct {
	Client client.Client
	// APIReader reads Secrets uncached, so the manager does not watch
	// every Secret of the cluster.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// WatchFilterValue shards by the cluster.x-k8s.io/watch-filter label.
	WatchFilterValue string
	// Render tunes the node's network configuration.
	Render cloudinit.Options

	// ipamInstalled is false when the cluster had no IPAddressClaim API at
	// start: machines that need claims then say so in a condition.
	ipamInstalled bool
}

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=packetmachines,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=packetmachines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddresses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler. Claims are watched through
// their controller owner reference, so a claim getting bound (or going away)
// wakes its machine. When the IPAddressClaim API is missing, the manager
// still starts and the machines that need claims report it.
func (r *PacketMachineReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	log := ctrl.LoggerFrom(ctx)
	clusterToMachines, err := util.ClusterToTypedObjectsMapper(mgr.GetClient(), &infrav1.PacketMachineList{}, mgr.GetScheme())
	if err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.PacketMachine{}).
		WithOptions(options).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(
			util.MachineToInfrastructureMapFunc(infrav1.GroupVersion.WithKind("PacketMachine")))).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToMachines),
			builder.WithPredicates(predicates.ClusterPausedTransitions(mgr.GetScheme(), log)))

	_, err = mgr.GetRESTMapper().RESTMapping(ipamv1.GroupVersion.WithKind("IPAddressClaim").GroupKind(), ipamv1.GroupVersion.Version)
	switch {
	case err == nil:
		r.ipamInstalled = true
		b = b.Owns(&ipamv1.IPAddressClaim{})
	case meta.IsNoMatchError(err):
		log.Error(err, "The IPAddressClaim API (CAPI's IPAM CRDs, "+ipamv1.GroupVersion.String()+") is not installed: "+
			"PacketMachines with addressFromPool will wait; install the CRDs and restart the manager")
	default:
		return err
	}
	return b.Complete(r)
}

// Reconcile brings a PacketMachine one step closer to its spec.
func (r *PacketMachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)

	pm := &infrav1.PacketMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, pm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	// A machine being moved (clusterctl move pauses the cluster) or paused
	// by hand is left alone, even when it is deleted: its claims must not be
	// released under a machine that lives on elsewhere.
	// Without the cluster-name label, or once the Cluster is gone, there is
	// nothing to be paused by.
	cluster, err := util.GetClusterFromMetadata(ctx, r.Client, pm.ObjectMeta)
	if err != nil && !errors.Is(err, util.ErrNoCluster) && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	if cluster != nil {
		log = log.WithValues("Cluster", klog.KObj(cluster))
		ctx = ctrl.LoggerInto(ctx, log)
		if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, pm); err != nil || isPaused || requeue {
			return ctrl.Result{}, err
		}
	}

	if !pm.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, pm)
	}
	if finalizerAdded, err := finalizers.EnsureFinalizer(ctx, r.Client, pm, infrav1.MachineFinalizer); err != nil || finalizerAdded {
		return ctrl.Result{}, err
	}

	machine, err := util.GetOwnerMachine(ctx, r.Client, pm.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, err
	}
	if machine == nil || cluster == nil {
		log.Info("Waiting for the Machine controller to set the owner reference and the cluster-name label")
		return ctrl.Result{}, nil
	}
	log = log.WithValues("Machine", klog.KObj(machine))
	ctx = ctrl.LoggerInto(ctx, log)

	patchHelper, err := patch.NewHelper(pm, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		if err := patchHelper.Patch(ctx, pm, patch.WithOwnedConditions{Conditions: []string{
			infrav1.IPAddressClaimedCondition,
			infrav1.IPAddressClaimsFulfilledCondition,
			infrav1.BootstrapDataRenderedCondition,
		}}); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()
	return ctrl.Result{}, r.reconcileNormal(ctx, &machineScope{PacketMachine: pm, Machine: machine, Cluster: cluster})
}

// machineScope is what the phases of one reconcile share.
type machineScope struct {
	PacketMachine *infrav1.PacketMachine
	Machine       *clusterv1.Machine
	Cluster       *clusterv1.Cluster
	// Networks are the machine's networks with their addresses, set by
	// reconcileIPAddresses for the phases after it.
	Networks []cloudinit.Network
}

// reconcileNormal runs the phases in order; a phase that is not done yet
// stops the run, and the watch on what it waits for starts the next one.
func (r *PacketMachineReconciler) reconcileNormal(ctx context.Context, s *machineScope) error {
	for _, phase := range []func(context.Context, *machineScope) (done bool, err error){
		r.reconcileIPAddresses,
		r.reconcileBootstrapData,
	} {
		if done, err := phase(ctx, s); err != nil || !done {
			return err
		}
	}
	return nil
}

// reconcileDelete releases what the machine holds, the device first (next
// issue), its addresses last, and only then lets the machine go.
func (r *PacketMachineReconciler) reconcileDelete(ctx context.Context, pm *infrav1.PacketMachine) error {
	released, err := r.releaseIPAddresses(ctx, pm)
	if err != nil || !released {
		return err
	}
	base := pm.DeepCopy()
	if !controllerutil.RemoveFinalizer(pm, infrav1.MachineFinalizer) {
		return nil
	}
	if err := r.Client.Patch(ctx, pm, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("removing the finalizer of PacketMachine %s: %w", pm.Name, err)
	}
	return nil
}
