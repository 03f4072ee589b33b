// Package manager assembles the CAPP controller manager. The capp-manager
// binary and the e2e suites start the provider through New, so they run the
// same thing.
package manager

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
)

// LeaderElectionID is the lease the replicas of the provider compete for.
const LeaderElectionID = "metal-vrf-capp-leader-election"

// Options configure the manager; each maps to a flag of capp-manager.
type Options struct {
	// LeaderElect makes replicas compete for a lease; only the leader reconciles.
	LeaderElect bool
	// LeaderElectionNamespace holds the lease; empty means the in-cluster namespace.
	LeaderElectionNamespace string
	// Namespace restricts the manager to one namespace; empty watches all.
	Namespace string
	// WatchFilterValue shards by the cluster.x-k8s.io/watch-filter label.
	WatchFilterValue string
	// HealthProbeBindAddress serves /healthz and /readyz; "0" disables it.
	HealthProbeBindAddress string
	// MetricsBindAddress serves Prometheus metrics; "0" disables it.
	MetricsBindAddress string
	// Concurrency is the number of PacketMachines reconciled at once.
	Concurrency int
	// MetadataURL is the metadata service nodes read; empty means Equinix Metal's.
	MetadataURL string
	// SkipControllerNameValidation lets several managers run in one process
	// (tests), which controller-runtime otherwise refuses.
	SkipControllerNameValidation bool
}

// Scheme returns the types the provider reads and writes.
func Scheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, clusterv1.AddToScheme, ipamv1.AddToScheme, infrav1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// New builds a manager with the provider's controllers. Start it with mgr.Start.
func New(ctx context.Context, cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	mgrOpts := ctrl.Options{
		Scheme:                        scheme,
		LeaderElection:                opts.LeaderElect,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		HealthProbeBindAddress:        opts.HealthProbeBindAddress,
		Metrics:                       metricsserver.Options{BindAddress: opts.MetricsBindAddress},
		// Secrets (bootstrap data, user-data) are read and written directly:
		// caching them would mean watching every Secret of the cluster.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	}
	if opts.Namespace != "" {
		mgrOpts.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{opts.Namespace: {}}}
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}

	r := &controllers.PacketMachineReconciler{
		Client:           mgr.GetClient(),
		APIReader:        mgr.GetAPIReader(),
		Recorder:         mgr.GetEventRecorder("packetmachine-controller"),
		WatchFilterValue: opts.WatchFilterValue,
		Render:           cloudinit.Options{MetadataURL: opts.MetadataURL},
	}
	if err := r.SetupWithManager(ctx, mgr, controller.Options{
		MaxConcurrentReconciles: opts.Concurrency,
		SkipNameValidation:      ptr.To(opts.SkipControllerNameValidation),
	}); err != nil {
		return nil, fmt.Errorf("setting up the PacketMachine controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}
