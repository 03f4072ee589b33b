// Command ipam-manager runs the metal-vrf IPAM provider: it serves
// IPAddressClaims that name a MetalVRFIPPool or a GlobalMetalVRFIPPool.
package main

import (
	"context"
	"flag"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/manager"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/managerutil"
)

func main() {
	var opts manager.Options
	fs := flag.CommandLine
	opts.AddFlags(fs, "claims, and of pools,")
	fs.IntVar(&opts.WebhookPort, "webhook-port", 9443, "Port of the validating webhook server; 0 disables the webhooks.")
	fs.StringVar(&opts.WebhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Directory holding tls.crt and tls.key for the webhook server.")
	fs.DurationVar(&opts.SourceResyncPeriod, "source-resync-period", controllers.DefaultSourceResyncPeriod,
		"How often pools read their sources (Equinix Metal VRFs, PacketCluster networks) again when no change triggers it.")
	fs.StringVar(&opts.AllocationNamespace, "allocation-namespace", "",
		"Namespace of the allocation records (a Lease per address in use); empty uses --leader-election-namespace, else the manager's own namespace.")
	fs.DurationVar(&opts.AdoptionSettle, "adoption-settle", controllers.DefaultAdoptionSettle,
		"How long the claims and IPAddresses of an in-cluster pool paused for adoption must be seen unchanged before this provider serves it (docs/adoption.md).")
	fs.DurationVar(&opts.PendingRecordGrace, "pending-record-grace", registry.DefaultPendingGrace,
		"How long after it was last confirmed the allocation record of an IPAddress that was admitted but not created is deleted.")
	managerutil.Main(func(ctx context.Context, cfg *rest.Config) (ctrl.Manager, error) {
		return manager.New(ctx, cfg, opts)
	})
}
