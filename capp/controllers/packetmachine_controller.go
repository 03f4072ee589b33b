// Package controllers holds the CAPP reconcilers. The PacketMachine
// reconciler builds a scope (the Machine, Cluster, PacketCluster and the
// device as the platform shows it), then runs the machine through its
// phases in order; a phase that is not done stops the run and says when to
// look again (the Metal API has no watch), and one function derives every
// condition from what the phases observed:
//
//	reconcileNormal
//	  reconcileIPAddresses   one IPAddressClaim per network with addressFromPool
//	  reconcileBootstrapData bootstrap data + network configuration -> Secret
//	  reconcileDevice        the device: adopted by tag or created, until active
//	  reconcilePorts         NICs out of the bond, one VLAN batch per port
//	  reconcileEndpointAddress the cluster's reserved endpoint routed to the
//	                         first control-plane device (vipManager CPEM)
//	  reconcileNodeReport    the node's user state: its network configured
//	reconcileDelete
//	  deleteDevice           the device, followed until the platform has none
//	  releaseIPAddresses     the claims, once nothing uses their addresses
//	  removeFinalizer
package controllers

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/internal/pacing"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// Defaults of the manager's device flags.
const (
	// DefaultMaxDeviceCreations is how many devices the manager has in
	// creation at once: the platform accepts about five in flight per
	// project and answers more with 429.
	DefaultMaxDeviceCreations = 5
	// DefaultNodeReportTimeout is how long after its device is active a
	// node may take to report its network configuration.
	DefaultNodeReportTimeout = 20 * time.Minute
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
	// Credentials gives the Metal client of a machine's cluster.
	Credentials *metal.ClientCache
	// Getenv reads the manager's environment for the fallback credentials.
	Getenv func(string) string
	// Creations limits the devices in creation at once.
	Creations *pacing.CreationSlots
	// ManagerTokenInBootstrapData lets bootstrap data written for upstream
	// CAPP get the manager's own token ({{ .apiKey }}) for a cluster without
	// a credentials Secret: unsafe when more than one team shares the
	// management cluster.
	ManagerTokenInBootstrapData bool
	// NodeReportTimeout is how long a node may take to report.
	NodeReportTimeout time.Duration
	// KubeVIPImage is the kube-vip image of the control-plane nodes of a
	// cluster with a VIP; empty means cloudinit.DefaultKubeVIPImage.
	KubeVIPImage string

	// ipamInstalled is false when the cluster had no IPAddressClaim API at
	// start: machines that need claims then say so in a condition.
	ipamInstalled bool
	// gate keeps each machine's Metal calls to its pace: the backoff
	// after a failed one, the poll interval of what it waits for.
	gate *pacing.Gate
	// vlans shares each project's VLAN list between the machines.
	vlans *device.VLANCache
}

// vlanListTTL is how long a project's VLAN list is shared between machines:
// a VLAN created since is seen after at most this long.
const vlanListTTL = 30 * time.Second

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=packetmachines,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=packetmachines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=packetclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddresses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler. Claims are watched through
// their controller owner reference, so a claim getting bound (or going away)
// wakes its machine; a PacketCluster's VIP getting bound wakes its
// machines, whose control-plane user-data carries it. When the IPAddressClaim API is missing, the manager
// still starts and the machines that need claims report it.
func (r *PacketMachineReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	log := ctrl.LoggerFrom(ctx)
	if r.NodeReportTimeout <= 0 {
		r.NodeReportTimeout = DefaultNodeReportTimeout
	}
	if r.Creations == nil {
		r.Creations = pacing.NewCreationSlots(DefaultMaxDeviceCreations, 0)
	}
	r.gate = pacing.NewGate(minPoll, retryMax)
	r.vlans = device.NewVLANCache(vlanListTTL)
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
			builder.WithPredicates(predicates.ClusterPausedTransitions(mgr.GetScheme(), log))).
		Watches(&infrav1.PacketCluster{}, handler.EnqueueRequestsFromMapFunc(r.packetClusterToMachines),
			builder.WithPredicates(predicate.Or[client.Object](vipChanged, reservedEndpointChanged))).
		Watches(&infrav1.PacketMachine{}, handler.EnqueueRequestsFromMapFunc(r.controlPlaneSiblings),
			builder.WithPredicates(controlPlaneDeleted)).
		WatchesRawSource(source.Channel(r.Creations.Wakeups(), &handler.EnqueueRequestForObject{}))

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
func (r *PacketMachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pm := &infrav1.PacketMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, pm); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone, by its delete path or another: its creation slot frees.
			r.Creations.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	ctx, cluster, stop, err := startReconcile(ctx, r.Client, pm, infrav1.MachineFinalizer)
	if stop || err != nil {
		return ctrl.Result{}, err
	}
	log := ctrl.LoggerFrom(ctx)

	machine, err := util.GetOwnerMachine(ctx, r.Client, pm.ObjectMeta)
	if err != nil {
		return ctrl.Result{}, err
	}
	if machine != nil {
		log = log.WithValues("Machine", klog.KObj(machine))
		ctx = ctrl.LoggerInto(ctx, log)
	}
	s := &machineScope{PacketMachine: pm, Machine: machine, Cluster: cluster}
	return patched(ctx, r.Client, pm, ownedConditions, s.setStatus, func() (ctrl.Result, error) {
		defer r.followCreation(s)
		if !pm.DeletionTimestamp.IsZero() {
			return r.reconcileDelete(ctx, s)
		}
		if machine == nil || cluster == nil {
			log.Info("Waiting for the Machine controller to set the owner reference and the cluster-name label")
			return ctrl.Result{}, nil
		}
		return r.reconcileNormal(ctx, s)
	})
}

// phase is one step of an object's life. It records the facts it observed
// in the scope; done false stops the run, and result says when to look
// again.
type phase[S any] func(context.Context, S) (result ctrl.Result, done bool, err error)

// reconcileNormal runs the phases in order until one is not done.
func (r *PacketMachineReconciler) reconcileNormal(ctx context.Context, s *machineScope) (ctrl.Result, error) {
	s.turn = r.gate.Begin(s.PacketMachine.UID, false)
	defer s.turn.End()
	phases := []phase[*machineScope]{
		r.reconcileIPAddresses,
		r.reconcileBootstrapData,
		r.reconcileDevice,
		r.reconcilePorts,
		r.reconcileEndpointAddress,
		r.reconcileNodeReport,
	}
	result, err := runPhases(ctx, s, &s.run, phases)
	if s.Device != nil && !s.turn.Failed() && err == nil {
		// The device was read: the next read is when the phase that
		// stopped said to look again, or a steady poll once all is done.
		wait := result.RequeueAfter
		if s.run.stoppedAt == len(phases) {
			wait = steadyPoll
		}
		if wait > 0 {
			s.turn.PollIn(wait)
		}
	}
	return result, err
}

// reconcileDelete lets the machine go in the opposite order: the device
// first, followed until the platform has none, then the addresses it used,
// then the machine.
func (r *PacketMachineReconciler) reconcileDelete(ctx context.Context, s *machineScope) (ctrl.Result, error) {
	s.deleting = true
	s.turn = r.gate.Begin(s.PacketMachine.UID, true)
	defer s.turn.End()
	return runPhases(ctx, s, &s.run, []phase[*machineScope]{
		r.deleteDevice,
		r.releaseIPAddresses,
		r.removeFinalizer,
	})
}

// runPhases runs phases in order until one is not done, and records in run
// where the run stopped.
func runPhases[S any](ctx context.Context, s S, run *phaseRun, phases []phase[S]) (ctrl.Result, error) {
	for i, p := range phases {
		result, done, err := p(ctx, s)
		if err != nil || !done {
			*run = phaseRun{stoppedAt: i, failed: err != nil}
			return result, err
		}
	}
	*run = phaseRun{stoppedAt: len(phases)}
	return ctrl.Result{}, nil
}

// openMetal begins a phase that calls the Metal API: it makes no call
// while the backoff after the object's last failed one lasts (the
// conditions that failure left stand), then opens the access (open), a
// set-up problem becoming the phase's fact (into, which records it in the
// phase's slot). ok false ends the phase with result and err.
func openMetal[A any](turn *pacing.Turn, into func(*setupError), open func() (A, error)) (access A, result ctrl.Result, ok bool, err error) {
	if wait := turn.Backoff(); wait > 0 {
		return access, ctrl.Result{RequeueAfter: wait}, false, nil
	}
	if access, err = open(); err != nil {
		result, _, err = setupFailed(into, err)
		return access, result, false, err
	}
	return access, ctrl.Result{}, true, nil
}

// setupFailed records a set-up problem (err a *setupError) as the fact of
// the phase that met it (into); it is looked at again now and then, since a
// Secret created later is not watched. Any other error is returned.
func setupFailed(into func(*setupError), err error) (ctrl.Result, bool, error) {
	serr, ok := errors.AsType[*setupError](err)
	if !ok {
		return ctrl.Result{}, false, err
	}
	into(serr)
	return ctrl.Result{RequeueAfter: noCredentials}, false, nil
}
