// Command capp-manager runs the Equinix Metal infrastructure provider's
// controllers: PacketMachines get their addresses from IPAM pools, their
// user-data with the network configuration, and their devices with the
// VLANs attached. The Metal API token comes from the PacketCluster's
// credentials Secret, or from METAL_API_KEY (PACKET_API_KEY) and
// METAL_API_URL in the environment.
package main

import (
	"context"
	"flag"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/manager"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/managerutil"
)

func main() {
	var opts manager.Options
	fs := flag.CommandLine
	opts.AddFlags(fs, "PacketMachines")
	fs.StringVar(&opts.MetadataURL, "metadata-url", cloudinit.DefaultMetadataURL, "Metadata service the nodes' network script reads its interfaces and user_state_url from.")
	fs.IntVar(&opts.MaxDeviceCreations, "max-device-creations", controllers.DefaultMaxDeviceCreations, "Devices in creation at once; machines beyond it wait (the platform answers more than about five in flight with 429).")
	fs.IntVar(&opts.MaxDeviceCreationsPerNamespace, "max-device-creations-per-namespace", 0, "Devices in creation at once in one namespace; 0 leaves only the fair share: the namespaces creating devices at once share --max-device-creations equally.")
	fs.BoolVar(&opts.ManagerTokenInBootstrapData, "manager-token-in-bootstrap-data", false, "UNSAFE with more than one tenant: bootstrap data written for upstream CAPP that asks for {{ .apiKey }} gets the manager's own METAL_API_KEY when its PacketCluster has no spec.credentialsRef, and the token lands in the machine's user-data Secret in the tenant's namespace.")
	fs.DurationVar(&opts.NodeReportTimeout, "node-report-timeout", controllers.DefaultNodeReportTimeout, "How long after its device is active a node may take to report its network configuration before NodeNetworkConfigured turns False with reason Timeout.")
	fs.StringVar(&opts.KubeVIPImage, "kube-vip-image", cloudinit.DefaultKubeVIPImage, "kube-vip image the control-plane nodes of a PacketCluster with spec.vip run to announce the VIP.")
	managerutil.Main(func(ctx context.Context, cfg *rest.Config) (ctrl.Manager, error) {
		return manager.New(ctx, cfg, opts)
	})
}
