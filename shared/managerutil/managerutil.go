// Package managerutil holds what the two providers' managers share: the
// settings and flags every CAPI provider manager has, the controller-runtime
// options they become, and the body of a manager's main.
package managerutil

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	capiflags "sigs.k8s.io/cluster-api/util/flags"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// Options are the settings every manager of the project has; each maps to
// a flag (see AddFlags).
type Options struct {
	// LeaderElect makes replicas compete for a lease; only the leader reconciles.
	LeaderElect bool
	// LeaderElectionNamespace holds the lease; empty means the in-cluster namespace.
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod time the leader election
	// (client-go's meaning); zero takes controller-runtime's defaults (15s,
	// 10s, 2s). The chaos tests shorten them to force takeovers often.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Namespace restricts the manager to one namespace; empty watches all.
	Namespace string
	// WatchFilterValue shards by the cluster.x-k8s.io/watch-filter label.
	WatchFilterValue string
	// HealthProbeBindAddress serves /healthz and /readyz; "0" disables it.
	HealthProbeBindAddress string
	// Diagnostics serve the Prometheus metrics and, when secure, pprof and
	// the log level as CAPI's managers do (--diagnostics-address,
	// --insecure-diagnostics, --tls-*): HTTPS, every request authenticated
	// and authorized through the API server, unless InsecureDiagnostics.
	// DiagnosticsAddress "0" disables it.
	Diagnostics capiflags.ManagerOptions
	// MetalEndpoints are the Metal API base URLs a credentials Secret may
	// name in baseURL; empty allows the public API and METAL_API_URL.
	MetalEndpoints []string
	// Concurrency is the number of objects each controller reconciles at once.
	Concurrency int
	// SkipControllerNameValidation lets one process build several managers
	// (tests, the local environment); controller-runtime otherwise refuses
	// a controller name it has seen before.
	SkipControllerNameValidation bool
}

// AddFlags registers the flags of the shared settings on fs; reconciled says
// what one worker reconciles, for the help of --concurrency. --kubeconfig is
// controller-runtime's own, read by ctrl.GetConfig.
func (o *Options) AddFlags(fs *flag.FlagSet, reconciled string) {
	fs.BoolVar(&o.LeaderElect, "leader-elect", false, "Compete for a lease so that only one replica reconciles. Required when running more than one replica.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election lease; empty uses the manager's own namespace.")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a standby waits after the leader's last renewal before it takes the lease over.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew its lease before it gives up leading; shorter than the lease duration.")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "How often replicas try to acquire or renew the lease.")
	fs.StringVar(&o.Namespace, "namespace", "", "Only watch this namespace; empty watches all namespaces.")
	fs.StringVar(&o.WatchFilterValue, "watch-filter", "", "Only reconcile objects labelled cluster.x-k8s.io/watch-filter with this value.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":9440", "Address of the /healthz and /readyz endpoints; 0 disables them.")
	// CAPI's own diagnostics flags (capiflags.AddManagerOptions registers
	// them on a pflag set; the managers use the standard flag package).
	fs.StringVar(&o.Diagnostics.DiagnosticsAddress, "diagnostics-address", ":8443",
		"Address of the diagnostics endpoint: /metrics, and /debug/pprof/ and /debug/flags/v unless --insecure-diagnostics. "+
			"Served over HTTPS, every request authenticated and authorized through the API server (get on the /metrics or /debug non-resource URL); 0 disables it.")
	fs.BoolVar(&o.Diagnostics.InsecureDiagnostics, "insecure-diagnostics", false,
		"Serve /metrics alone over plain HTTP to anyone who reaches the address. Unsafe where the Pod network is shared.")
	fs.StringVar(&o.Diagnostics.TLSMinVersion, "tls-min-version", "VersionTLS12", "Minimum TLS version of the diagnostics (and webhook) server.")
	fs.Func("tls-cipher-suites", "Comma-separated TLS cipher suites of the diagnostics (and webhook) server; empty takes Go's defaults.", func(v string) error {
		o.Diagnostics.TLSCipherSuites = strings.Split(v, ",")
		return nil
	})
	fs.Func("metal-endpoints", "Comma-separated Metal API base URLs a credentials Secret may name in baseURL; a Secret naming another is refused before any request. Default: the public API ("+metal.DefaultBaseURL+") and $"+metal.EnvBaseURL+".", func(v string) error {
		o.MetalEndpoints = append(o.MetalEndpoints, strings.Split(v, ",")...)
		_, err := metal.NewEndpoints(o.MetalEndpoints...)
		return err
	})
	fs.IntVar(&o.Concurrency, "concurrency", 10, fmt.Sprintf("Number of %s reconciled at once.", reconciled))
}

// LeaseName is the lease the replicas of a manager compete for: base, or
// with --watch-filter base and the filter, so the managers of several
// shards run side by side in one namespace, each with its own leader.
func (o Options) LeaseName(base string) string {
	if o.WatchFilterValue == "" {
		return base
	}
	return base + "-" + o.WatchFilterValue
}

// ManagerOptions returns the controller-runtime options of these settings
// (the leader election lease is LeaseName(leaderElectionID)),
// and the TLS options of the diagnostics, for the webhook server too.
func (o Options) ManagerOptions(scheme *runtime.Scheme, leaderElectionID string) (ctrl.Options, []func(*tls.Config), error) {
	tlsOpts, diagnostics, err := capiflags.GetManagerOptions(o.Diagnostics)
	if err != nil {
		return ctrl.Options{}, nil, err
	}
	opts := ctrl.Options{
		Scheme:                  scheme,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        o.LeaseName(leaderElectionID),
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// A leader that stops gives the lease back at once, so a standby
		// takes over without waiting for the lease to expire.
		LeaderElectionReleaseOnCancel: true,
		HealthProbeBindAddress:        o.HealthProbeBindAddress,
		Metrics:                       *diagnostics,
		Controller:                    config.Controller{SkipNameValidation: ptr.To(o.SkipControllerNameValidation)},
	}
	for _, d := range []struct {
		value time.Duration
		field **time.Duration
	}{{o.LeaseDuration, &opts.LeaseDuration}, {o.RenewDeadline, &opts.RenewDeadline}, {o.RetryPeriod, &opts.RetryPeriod}} {
		if d.value != 0 {
			*d.field = ptr.To(d.value)
		}
	}
	// The managers never read managed fields, which are often the larger
	// part of a small object such as an IPAddress: the cache keeps objects
	// without them (an update that omits them leaves the server's alone).
	opts.Cache = cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
	if o.Namespace != "" {
		opts.Cache.DefaultNamespaces = map[string]cache.Config{o.Namespace: {}}
	}
	return opts, tlsOpts, nil
}

// Endpoints is the allow-list of the Metal API endpoints credentials Secrets
// may name: MetalEndpoints, or the public API and METAL_API_URL read
// through getenv.
func (o Options) Endpoints(getenv func(string) string) (*metal.Endpoints, error) {
	if len(o.MetalEndpoints) == 0 {
		return metal.DefaultEndpoints(getenv)
	}
	return metal.NewEndpoints(o.MetalEndpoints...)
}

// NewScheme returns a scheme with the types every manager of the project
// reads (client-go's, CAPI's core and IPAM types) and those add registers.
func NewScheme(add ...func(*runtime.Scheme) error) (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, addTo := range append([]func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, clusterv1.AddToScheme, ipamv1.AddToScheme,
	}, add...) {
		if err := addTo(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// AddProbes serves /healthz, and /readyz with ready (healthz.Ping when nil).
func AddProbes(mgr ctrl.Manager, ready healthz.Checker) error {
	if ready == nil {
		ready = healthz.Ping
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("readyz", ready)
}

// Main is the body of a manager binary's main, once its flags are
// registered: it parses them, loads the kubeconfig, builds the manager with
// newManager and runs it until SIGINT or SIGTERM. It exits the process with
// status 1 on any failure.
func Main(newManager func(context.Context, *rest.Config) (ctrl.Manager, error)) {
	klog.InitFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(klog.NewKlogr())
	log := ctrl.Log.WithName("setup")

	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "Loading the kubeconfig")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	mgr, err := newManager(ctx, cfg)
	if err != nil {
		log.Error(err, "Setting up the manager")
		os.Exit(1)
	}
	log.Info("Starting the manager")
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "Running the manager")
		os.Exit(1)
	}
}
