package workload

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// TestFlavors brings a cluster of each of the other shipped flavors up
// through QuickStart and takes it down (the deletion that ends QuickStart):
// hybrid-unbonded (the VLAN on eth1, out of the bond) and incluster (the
// nodes' addresses from the in-cluster IPAM provider's InClusterIPPool).
// Each also checks what makes it the flavor it is (flavorChecks).
func TestFlavors(t *testing.T) {
	t.Parallel()
	for flavor, port := range map[string]int64{"hybrid-unbonded": 6453, "incluster": 6463} {
		t.Run(flavor, func(t *testing.T) {
			t.Parallel()
			g := newG(t)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			r := createCluster(ctx, t, g, flavor, flavor, withEndpointPort(port))
			runSteps(ctx, t, r, []step{
				{"QuickStart", quickStart},
				{"Flavor", flavorChecks[flavor]},
				{"Deletion", deletion},
			})
		})
	}
}

// flavorChecks check, on a cluster that came up, what makes each flavor
// the one it is.
var flavorChecks = map[string]func(context.Context, *testing.T, *run){
	// Each device's eth1 is out of the bond and carries the nodes' VLAN
	// (the platform's view, through the SDK); bond0 carries none.
	"hybrid-unbonded": func(ctx context.Context, t *testing.T, r *run) {
		g := newG(t)
		devices := r.devicesByProviderID(ctx, g)
		g.Expect(devices).To(HaveLen(2))
		for id := range devices {
			d, err := r.metalAPI.GetDevice(ctx, device.DeviceID(id))
			g.Expect(err).NotTo(HaveOccurred())
			ports := map[string]int{}
			for _, p := range d.GetNetworkPorts() {
				ports[p.GetName()] = len(p.GetVirtualNetworks())
				if p.GetName() == "eth1" {
					data := p.GetData()
					g.Expect(data.GetBonded()).To(BeFalse(), "eth1 of %s is out of the bond", id)
				}
			}
			g.Expect(ports).To(HaveKeyWithValue("eth1", 1), "eth1 of %s carries the nodes' VLAN", id)
			g.Expect(ports).To(HaveKeyWithValue("bond0", 0), "bond0 of %s carries no VLAN", id)
		}
	},
	// The nodes' addresses come from the InClusterIPPool, the in-cluster
	// provider's: no MetalVRFIPPool, no record of ours.
	"incluster": func(ctx context.Context, t *testing.T, r *run) {
		g := newG(t)
		addresses := &ipamv1.IPAddressList{}
		g.Expect(r.k8s.List(ctx, addresses, client.InNamespace(r.ns))).To(Succeed())
		g.Expect(addresses.Items).To(HaveLen(2))
		for _, a := range addresses.Items {
			g.Expect(a.Spec.PoolRef.Kind).To(Equal("InClusterIPPool"), "IPAddress %s", a.Name)
			g.Expect(a.Spec.PoolRef.Name).To(Equal(r.name + "-nodes"))
		}
		pools := &v1alpha1.MetalVRFIPPoolList{}
		g.Expect(r.k8s.List(ctx, pools, client.InNamespace(r.ns))).To(Succeed())
		g.Expect(pools.Items).To(BeEmpty())
	},
}
