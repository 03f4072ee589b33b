// Command capp-manager runs the Equinix Metal infrastructure provider's
// controllers: PacketMachines get their addresses from IPAM pools and their
// user-data with the network configuration.
package main

import (
	"context"
	"flag"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/manager"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/managerutil"
)

func main() {
	var opts manager.Options
	fs := flag.CommandLine
	opts.AddFlags(fs, "PacketMachines")
	fs.StringVar(&opts.MetadataURL, "metadata-url", cloudinit.DefaultMetadataURL, "Metadata service the nodes' network script reads its interfaces and user_state_url from.")
	managerutil.Main(func(ctx context.Context, cfg *rest.Config) (ctrl.Manager, error) {
		return manager.New(ctx, cfg, opts)
	})
}
