// Package manager assembles the CAPP controller manager. The capp-manager
// binary and the e2e suites start the provider through New, so they run the
// same thing.
package manager

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/internal/pacing"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/managerutil"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// LeaderElectionID is the lease the replicas of the provider compete for
// (with --watch-filter, followed by the filter: see managerutil.LeaseName).
const LeaderElectionID = "metal-vrf-capp-leader-election"

// Options configure the manager; each maps to a flag of capp-manager.
type Options struct {
	managerutil.Options
	// MetadataURL is the metadata service nodes read; empty means Equinix Metal's.
	MetadataURL string
	// MaxDeviceCreations is how many devices are in creation at once; 0
	// means controllers.DefaultMaxDeviceCreations.
	MaxDeviceCreations int
	// MaxDeviceCreationsPerNamespace caps one namespace's creations in
	// flight; 0 leaves only the fair share (see pacing.CreationSlots).
	MaxDeviceCreationsPerNamespace int
	// ManagerTokenInBootstrapData hands the manager's own token to
	// bootstrap data asking for {{ .apiKey }} of a cluster without a
	// credentials Secret. Unsafe with more than one tenant.
	ManagerTokenInBootstrapData bool
	// NodeReportTimeout is how long a node may take to report its network
	// configuration; 0 means controllers.DefaultNodeReportTimeout.
	NodeReportTimeout time.Duration
	// KubeVIPImage is the kube-vip image of the control-plane nodes of a
	// cluster with a VIP; empty means cloudinit.DefaultKubeVIPImage.
	KubeVIPImage string
	// Getenv reads the fallback credentials (METAL_API_KEY or
	// PACKET_API_KEY, METAL_API_URL); os.Getenv when nil.
	Getenv func(string) string
	// MetalTimeout and MetalRetry tune the Metal API clients; zero values
	// take the client's defaults. Tests shorten them.
	MetalTimeout time.Duration
	MetalRetry   metal.RetryPolicy
}

// Scheme returns the types the provider reads and writes.
func Scheme() (*runtime.Scheme, error) {
	return managerutil.NewScheme(infrav1.AddToScheme)
}

// The diagnostics endpoint authenticates and authorizes each request through
// the API server (controller-runtime's metrics filters).
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// New builds a manager with the provider's controllers. Start it with mgr.Start.
func New(ctx context.Context, cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	mgrOpts, _, err := opts.ManagerOptions(scheme, LeaderElectionID)
	if err != nil {
		return nil, err
	}
	// Secrets (bootstrap data, user-data) are read and written directly:
	// caching them would mean watching every Secret of the cluster.
	mgrOpts.Client = client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	endpoints, err := opts.Endpoints(getenv)
	if err != nil {
		return nil, fmt.Errorf("--metal-endpoints: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}

	if err := setupControllers(ctx, mgr, opts, getenv, endpoints); err != nil {
		return nil, err
	}
	if err := managerutil.AddProbes(mgr, nil); err != nil {
		return nil, err
	}
	return mgr, nil
}

// setupControllers adds the PacketCluster and PacketMachine reconcilers.
func setupControllers(ctx context.Context, mgr ctrl.Manager, opts Options, getenv func(string) string, endpoints *metal.Endpoints) error {
	maxCreations := opts.MaxDeviceCreations
	if maxCreations <= 0 {
		maxCreations = controllers.DefaultMaxDeviceCreations
	}
	// One cache for both reconcilers: a cluster's machines and its
	// PacketCluster share the client of their credentials.
	credentials := metal.NewClientCache(metal.Config{
		BaseURL: getenv(metal.EnvBaseURL),
		Timeout: opts.MetalTimeout, Retry: opts.MetalRetry, Registerer: ctrlmetrics.Registry,
	}, metal.CacheOptions{Endpoints: endpoints})
	controllerOpts := controller.Options{
		MaxConcurrentReconciles: opts.Concurrency,
		SkipNameValidation:      ptr.To(opts.SkipControllerNameValidation),
	}
	cr := &controllers.PacketClusterReconciler{
		Client:           mgr.GetClient(),
		APIReader:        mgr.GetAPIReader(),
		Recorder:         mgr.GetEventRecorder("packetcluster-controller"),
		WatchFilterValue: opts.WatchFilterValue,
		Credentials:      credentials,
		Getenv:           getenv,
	}
	if err := cr.SetupWithManager(ctx, mgr, controllerOpts); err != nil {
		return fmt.Errorf("setting up the PacketCluster controller: %w", err)
	}
	r := &controllers.PacketMachineReconciler{
		Client:            mgr.GetClient(),
		APIReader:         mgr.GetAPIReader(),
		Recorder:          mgr.GetEventRecorder("packetmachine-controller"),
		WatchFilterValue:  opts.WatchFilterValue,
		Render:            cloudinit.Options{MetadataURL: opts.MetadataURL},
		Credentials:       credentials,
		Getenv:            getenv,
		Creations:         pacing.NewCreationSlots(maxCreations, opts.MaxDeviceCreationsPerNamespace),
		NodeReportTimeout: opts.NodeReportTimeout,
		KubeVIPImage:      opts.KubeVIPImage,

		ManagerTokenInBootstrapData: opts.ManagerTokenInBootstrapData,
	}
	if err := r.SetupWithManager(ctx, mgr, controllerOpts); err != nil {
		return fmt.Errorf("setting up the PacketMachine controller: %w", err)
	}
	if err := managerutil.CollectWhileLeading(mgr, ctrlmetrics.Registry, r.Creations); err != nil {
		return fmt.Errorf("setting up the device creation metrics: %w", err)
	}
	return nil
}
