// Package manager assembles the IPAM provider's controller manager. The
// ipam-manager binary, the local environment behind `make run` and the e2e
// suites all start the provider through New, so they run the same thing.
package manager

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	cappv1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/webhooks"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// LeaderElectionID is the lease the replicas of the provider compete for.
const LeaderElectionID = "metal-vrf-ipam-leader-election"

// Options configure the manager; each maps to a flag of ipam-manager.
type Options struct {
	// LeaderElect makes replicas compete for a lease; only the leader allocates.
	LeaderElect bool
	// LeaderElectionNamespace holds the lease; empty means the in-cluster namespace.
	LeaderElectionNamespace string
	// Namespace restricts the manager to one namespace; empty watches all.
	Namespace string
	// WatchFilterValue shards by the cluster.x-k8s.io/watch-filter label.
	WatchFilterValue string
	// WebhookPort serves the validating webhooks; 0 disables them.
	WebhookPort int
	// WebhookHost and WebhookCertDir locate the webhook server and its certificates.
	WebhookHost    string
	WebhookCertDir string
	// HealthProbeBindAddress serves /healthz and /readyz; "0" disables it.
	HealthProbeBindAddress string
	// MetricsBindAddress serves Prometheus metrics; "0" disables it.
	MetricsBindAddress string
	// Concurrency is the number of claims, and of pools, reconciled at once.
	Concurrency int
	// SourceResyncPeriod is how often pool sources (spec.vrf,
	// spec.networkRef) are read again without a triggering event; 0 means
	// controllers.DefaultSourceResyncPeriod.
	SourceResyncPeriod time.Duration
	// MetalTimeout and MetalRetry tune the Metal API clients of VRF pools;
	// zero values take the client's defaults. Tests shorten them.
	MetalTimeout time.Duration
	MetalRetry   metal.RetryPolicy
	// SkipControllerNameValidation lets one process build several managers
	// (tests, the local environment); controller-runtime otherwise refuses
	// a controller name it has seen before.
	SkipControllerNameValidation bool
}

// Scheme returns the types the provider reads and writes.
func Scheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, clusterv1.AddToScheme, ipamv1.AddToScheme, v1alpha1.AddToScheme,
		cappv1.AddToScheme, // PacketClusters feed pools through spec.networkRef
	} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// New builds a manager with the provider's controllers and, unless
// WebhookPort is 0, its webhooks. Start it with mgr.Start.
func New(ctx context.Context, cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	mgrOpts := ctrl.Options{
		Scheme:                  scheme,
		LeaderElection:          opts.LeaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		// A leader that stops gives the lease back at once, so a standby
		// takes over without waiting for the lease to expire.
		LeaderElectionReleaseOnCancel: true,
		HealthProbeBindAddress:        opts.HealthProbeBindAddress,
		Metrics:                       metricsserver.Options{BindAddress: opts.MetricsBindAddress},
		Controller:                    config.Controller{SkipNameValidation: ptr.To(opts.SkipControllerNameValidation)},
	}
	if opts.Namespace != "" {
		mgrOpts.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{opts.Namespace: {}}}
	}
	if opts.WebhookPort != 0 {
		mgrOpts.WebhookServer = webhook.NewServer(webhook.Options{
			Host: opts.WebhookHost, Port: opts.WebhookPort, CertDir: opts.WebhookCertDir,
		})
	}

	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if err := controllers.SetupWithManager(ctx, mgr, controllers.Options{
		WatchFilterValue:   opts.WatchFilterValue,
		Concurrency:        opts.Concurrency,
		SourceResyncPeriod: opts.SourceResyncPeriod,
		Metal: metal.Config{
			Timeout: opts.MetalTimeout, Retry: opts.MetalRetry, Registerer: ctrlmetrics.Registry,
		},
	}); err != nil {
		return nil, err
	}
	if opts.WebhookPort != 0 {
		if err := webhooks.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("setting up the webhooks: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	readyz := healthz.Ping
	if opts.WebhookPort != 0 {
		readyz = mgr.GetWebhookServer().StartedChecker()
	}
	if err := mgr.AddReadyzCheck("readyz", readyz); err != nil {
		return nil, err
	}
	return mgr, nil
}
