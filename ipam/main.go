// Command ipam-manager runs the metal-vrf IPAM provider: it serves
// IPAddressClaims that name a MetalVRFIPPool or a GlobalMetalVRFIPPool.
package main

import (
	"flag"
	"os"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/manager"
)

func main() {
	// --kubeconfig is registered by controller-runtime and read by ctrl.GetConfig.
	var opts manager.Options
	fs := flag.CommandLine
	klog.InitFlags(fs)
	fs.BoolVar(&opts.LeaderElect, "leader-elect", false, "Compete for a lease so that only one replica allocates addresses. Required when running more than one replica.")
	fs.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election lease; empty uses the manager's own namespace.")
	fs.StringVar(&opts.Namespace, "namespace", "", "Only watch this namespace; empty watches all namespaces.")
	fs.StringVar(&opts.WatchFilterValue, "watch-filter", "", "Only reconcile objects labelled cluster.x-k8s.io/watch-filter with this value.")
	fs.IntVar(&opts.WebhookPort, "webhook-port", 9443, "Port of the validating webhook server; 0 disables the webhooks.")
	fs.StringVar(&opts.WebhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Directory holding tls.crt and tls.key for the webhook server.")
	fs.StringVar(&opts.HealthProbeBindAddress, "health-probe-bind-address", ":9440", "Address of the /healthz and /readyz endpoints; 0 disables them.")
	fs.StringVar(&opts.MetricsBindAddress, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.IntVar(&opts.Concurrency, "concurrency", 10, "Number of claims, and of pools, reconciled at once.")
	fs.DurationVar(&opts.SourceResyncPeriod, "source-resync-period", controllers.DefaultSourceResyncPeriod,
		"How often pools read their sources (Equinix Metal VRFs, PacketCluster networks) again when no change triggers it.")
	flag.Parse()

	ctrl.SetLogger(klog.NewKlogr())
	log := ctrl.Log.WithName("setup")

	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "Loading the kubeconfig")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	mgr, err := manager.New(ctx, cfg, opts)
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
