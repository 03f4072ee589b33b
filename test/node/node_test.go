package node

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// bootstrapData plays a bootstrap provider's cloud-config, Jinja header and
// all: the network configuration is merged into it, and its own command,
// which leaves the node's hostname as cloud-init's Jinja rendered it, must
// still run after the network script.
const bootstrapData = `## template: jinja
#cloud-config
runcmd:
  - [sh, -c, 'echo "{{ v1.local_hostname }}" >/var/lib/bootstrap-ran']
`

// nodesPool is the MetalVRFIPPool the nodes' InternalIP comes from; in a
// namespace of its own, each node gets its first address.
var nodesPool = v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.60.1.2-10.60.1.6"}, Prefix: ptr.To[int32](29), Gateway: "10.60.1.1",
	DNSServers: []string{"10.60.1.1"}}

const nodeIP = "10.60.1.2"

func nodesNetwork(routes ...infrav1.RouteSpec) infrav1.Network {
	return infrav1.Network{
		VXLAN: simtest.NodesVXLAN, AddressType: infrav1.AddressTypeInternal, Routes: routes,
		AddressFromPool: &corev1.TypedLocalObjectReference{
			APIGroup: ptr.To("ipam.cluster.x-k8s.io"), Kind: v1alpha1.MetalVRFIPPoolKind, Name: "nodes",
		},
	}
}

// Scenario 1 and 4: bond0 carries two VLANs, an IPv4 network from the pool
// with its gateway and a static route, and an IPv6 one; after a reboot the
// configuration is back, and running the script again changes nothing.
func TestBondedNodeAndReboot(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	n := provision(t, "bonded", netip.MustParseAddr("198.51.100.1"), []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{
		nodesNetwork(infrav1.RouteSpec{Destination: "192.168.0.0/16"}),
		{VXLAN: 1003, AddressType: infrav1.AddressTypeInternal, Address: "fd00:63::5/64", Gateway: "fd00:63::1", Nameservers: []string{"fd00:63::53"}},
	}}})

	n.vm.boot()
	first := n.vm.probe("boot.json")
	want := []string{
		"link bond0.1001: vlan 802.1Q 1001 on bond0",
		"link bond0.1003: vlan 802.1Q 1003 on bond0",
		"link eth0: in bond0",
		"link eth1: in bond0",
		"addr bond0.1001: " + nodeIP + "/29",
		"addr bond0.1003: fd00:63::5/64",
		"route default via 10.60.1.1 dev bond0.1001",
		"route 192.168.0.0/16 via 10.60.1.1 dev bond0.1001",
		"route default via fd00:63::1 dev bond0.1003",
	}
	g.Expect(first.summary()).To(ContainElements(want), n.vm.cloudInitLog())
	g.Expect(first.Kubelet).To(Equal("KUBELET_EXTRA_ARGS=--node-ip=" + nodeIP + ",fd00:63::5"))
	g.Expect(strings.TrimSpace(n.vm.file("/var/lib/bootstrap-ran"))).To(Equal("bonded"), "the bootstrap's own command did not run")
	// The pool's DNS server (carried on the IPAddress) and the static
	// network's, first in the image's plain resolv.conf (no resolvconf).
	resolvConf := n.vm.file("/etc/resolv.conf")
	t.Logf("/etc/resolv.conf on the booted node:\n%s", resolvConf)
	g.Expect(resolvConf).To(HavePrefix("# Nameservers of the VLAN networks, written by the network script of the Cluster API Equinix Metal provider.\n" +
		"nameserver 10.60.1.1\nnameserver fd00:63::53\n"))
	n.expectReported(g, "succeeded", 1)
	n.expectCondition(g, metav1.ConditionTrue, infrav1.NodeNetworkConfiguredReason, "network_configuration_success")

	n.vm.boot(rerunArg)
	again := n.vm.probe("boot.json")
	g.Expect(again.summary()).To(Equal(first.summary()), "the configuration did not come back after the reboot")
	g.Expect(again.Files).To(Equal(first.Files))
	g.Expect(strings.TrimSpace(n.vm.file("/var/lib/node-probe/rerun.rc"))).To(Equal("0"), n.vm.file("/var/lib/node-probe/rerun.log"))
	rerun := n.vm.probe("rerun.json")
	g.Expect(rerun.summary()).To(Equal(again.summary()), "running the script again changed the network")
	g.Expect(rerun.Files).To(Equal(again.Files), "running the script again changed the files")
	g.Expect(n.vm.file("/etc/resolv.conf")).To(Equal(resolvConf), "a reboot and a second run left resolv.conf as the first boot wrote it")
	n.expectReported(g, "succeeded", 2)
	n.expectCondition(g, metav1.ConditionTrue, infrav1.NodeNetworkConfiguredReason, "network_configuration_success")
}

// TestSingleBootNodes boots scenarios 2 and 3 one after the other, beside
// TestBondedNodeAndReboot's two boots: two guests at a time keep both cores
// of this machine busy, where a third slowed each boot from about 2 to
// 3.5 minutes and the package took no less time.
func TestSingleBootNodes(t *testing.T) {
	t.Parallel()
	t.Run("HybridUnbonded", hybridUnbondedNode)
	t.Run("ReportsFailure", nodeReportsFailure)
}

// Scenario 2: hybrid unbonded. eth1 leaves the bond and carries its VLAN;
// bond0 stays up on eth0, carrying its own and reaching the simulator.
func hybridUnbondedNode(t *testing.T) {
	g := NewWithT(t)
	n := provision(t, "unbonded", netip.MustParseAddr("198.51.100.2"), []infrav1.Port{
		{Name: "bond0", Networks: []infrav1.Network{nodesNetwork()}},
		{Name: "eth1", Networks: []infrav1.Network{{VXLAN: 1003, Address: "192.168.3.5/24"}}},
	})

	n.vm.boot()
	s := n.vm.probe("boot.json")
	summary := s.summary()
	g.Expect(summary).To(ContainElements(
		"link bond0.1001: vlan 802.1Q 1001 on bond0",
		"link eth1.1003: vlan 802.1Q 1003 on eth1",
		"link eth0: in bond0",
		"addr bond0: 10.0.2.15/24",
		"addr bond0.1001: "+nodeIP+"/29",
		"addr eth1.1003: 192.168.3.5/24",
		"route default via 10.60.1.1 dev bond0.1001",
	), n.vm.cloudInitLog())
	g.Expect(summary).NotTo(ContainElement("link eth1: in bond0"))
	g.Expect(s.link("eth1").Flags).To(ContainElement("UP"))
	g.Expect(s.link("bond0").Flags).To(ContainElement("LOWER_UP"))
	interfaces := n.vm.file("/etc/network/interfaces")
	g.Expect(interfaces).To(MatchRegexp(`(?m)^\s*bond-slaves eth0$`), "eth1 is still enslaved at boot")
	n.expectReported(g, "succeeded", 1)
	n.expectCondition(g, metav1.ConditionTrue, infrav1.NodeNetworkConfiguredReason, "network_configuration_success")
}

// Scenario 3: a route the kernel refuses (its gateway is the subnet's
// broadcast address) fails the configuration; the node says so, and the
// PacketMachine's condition says which interface failed.
func nodeReportsFailure(t *testing.T) {
	g := NewWithT(t)
	n := provision(t, "failing", netip.MustParseAddr("198.51.100.3"), []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{
		nodesNetwork(),
		{VXLAN: 1002, Address: "10.61.0.5/28", Routes: []infrav1.RouteSpec{{Destination: "172.16.0.0/12", Gateway: "10.61.0.15"}}},
	}}})

	n.vm.boot()
	s := n.vm.probe("boot.json")
	g.Expect(s.summary()).NotTo(ContainElement(ContainSubstring("172.16.0.0/12")))
	g.Expect(n.vm.cloudInitLog()).To(ContainSubstring("Error: Nexthop has invalid gateway."))
	n.expectReported(g, "failed", 1)
	n.expectCondition(g, metav1.ConditionFalse, infrav1.NodeNetworkFailedReason, "network_configuration_failed: ifup bond0.1002")
}

// summary is what the tests compare of a state, one sorted line per fact:
// VLAN links with their 802.1Q id and parent, bond members, addresses
// (link-local ones aside) and routes.
func (s state) summary() []string {
	var out []string
	for _, l := range s.Link {
		if l.LinkInfo.Kind == "vlan" {
			out = append(out, fmt.Sprintf("link %s: vlan %s %d on %s", l.Name, l.LinkInfo.Data.Protocol, l.LinkInfo.Data.ID, l.Parent))
		}
		if l.Master != "" {
			out = append(out, fmt.Sprintf("link %s: in %s", l.Name, l.Master))
		}
	}
	for _, i := range s.Addr {
		for _, a := range s.addrs(i.Name) {
			if !strings.HasPrefix(a, "fe80:") {
				out = append(out, fmt.Sprintf("addr %s: %s", i.Name, a))
			}
		}
	}
	for _, r := range slices.Concat(s.Route4, s.Route6) {
		line := "route " + r.Dst
		if r.Gateway != "" {
			line += " via " + r.Gateway
		}
		out = append(out, line+" dev "+r.Dev)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// node is a PacketMachine whose device has been created and its VLANs
// attached, and the VM that boots as that device.
type node struct {
	t        *testing.T
	pm       *infrav1.PacketMachine
	deviceID string
	vm       *vm
}

// provision creates a PacketMachine with ports in a namespace of its own,
// waits until the CAPP manager created its device with the rendered
// user-data and attached its VLANs, and prepares the VM that boots as that
// device, reaching the simulator from addr.
func provision(t *testing.T, name string, addr netip.Addr, ports []infrav1.Port) *node {
	t.Helper()
	n := newMachine(t, newCluster(t, name, nodesPool), name, ports)
	dev, err := metalAPI.GetDevice(t.Context(), n.deviceID)
	if err != nil {
		t.Fatal(err)
	}
	var macs [2]string
	for _, p := range dev.GetNetworkPorts() {
		data := p.GetData()
		switch p.GetName() {
		case "eth0":
			macs[0] = data.GetMac()
		case "eth1":
			macs[1] = data.GetMac()
		}
	}
	NewWithT(t).Expect(macs).NotTo(ContainElement(""), "the device has no eth0 or eth1 MAC")
	n.vm = newVM(t, n.deviceID, name, dev.GetUserdata(), macs, addr)
	return n
}

// newCluster creates, in a new namespace, a Cluster named cluster with its
// PacketCluster and the MetalVRFIPPool "nodes" of pool, and returns the
// namespace.
func newCluster(t *testing.T, name string, pool v1alpha1.MetalVRFIPPoolSpec) string {
	t.Helper()
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	g := NewWithT(t)
	ctx := t.Context()
	k8s := env.Client
	ns, err := env.NewNamespace(ctx, name)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k8s.Create(ctx, &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodes"}, Spec: pool})).To(Succeed())

	g.Expect(k8s.Create(ctx, &infrav1.PacketCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster", Labels: map[string]string{clusterv1.ClusterNameLabel: "cluster"}},
		Spec:       infrav1.PacketClusterSpec{ProjectID: simtest.Project, Metro: simtest.Metro},
	})).To(Succeed())
	g.Expect(k8s.Create(ctx, &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster"},
		Spec: clusterv1.ClusterSpec{
			Paused:            ptr.To(false),
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "PacketCluster", Name: "cluster"},
		},
	})).To(Succeed())
	return ns
}

// newMachine creates a Machine with bootstrapData and its PacketMachine
// with ports in ns, and waits until the CAPP manager created its device
// with the rendered user-data and attached its VLANs.
func newMachine(t *testing.T, ns, name string, ports []infrav1.Port) *node {
	t.Helper()
	return newBootstrappedMachine(t, ns, name, bootstrapData, ports)
}

// newBootstrappedMachine is newMachine with the bootstrap data data.
func newBootstrappedMachine(t *testing.T, ns, name, data string, ports []infrav1.Port) *node {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	k8s := env.Client
	bootstrap, machine := testenv.BootstrappedMachine(ns, "cluster", name, data)
	g.Expect(k8s.Create(ctx, bootstrap)).To(Succeed())
	g.Expect(k8s.Create(ctx, machine)).To(Succeed())
	pm := &infrav1.PacketMachine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{clusterv1.ClusterNameLabel: "cluster"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID,
			}},
		},
		Spec: infrav1.PacketMachineSpec{Plan: "c3.small.x86", OperatingSystem: "debian_12", Ports: ports},
	}
	g.Expect(k8s.Create(ctx, pm)).To(Succeed())

	n := &node{t: t, pm: pm}
	g.Eventually(n.condition(infrav1.VLANsAttachedCondition)).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).
		Should(HaveField("Status", metav1.ConditionTrue))
	n.deviceID = device.DeviceID(n.get().Spec.ProviderID)
	return n
}

func (n *node) get() *infrav1.PacketMachine {
	n.t.Helper()
	current := &infrav1.PacketMachine{}
	if err := env.Client.Get(n.t.Context(), client.ObjectKeyFromObject(n.pm), current); err != nil {
		n.t.Fatal(err)
	}
	return current
}

func (n *node) condition(t string) func() *metav1.Condition {
	return func() *metav1.Condition { return conditions.Get(n.get(), t) }
}

// expectCondition waits for NodeNetworkConfigured to follow the node's
// report (the manager polls the device's events).
func (n *node) expectCondition(g *WithT, status metav1.ConditionStatus, reason, message string) {
	n.t.Helper()
	g.Eventually(n.condition(infrav1.NodeNetworkConfiguredCondition)).WithTimeout(time.Minute).WithPolling(time.Second).Should(And(
		Not(BeNil()), HaveField("Status", status), HaveField("Reason", reason), HaveField("Message", ContainSubstring(message))))
}

// expectReported checks the simulator received count user states state
// from the node, and that the node said it started each time.
func (n *node) expectReported(g *WithT, state string, count int) {
	n.t.Helper()
	events, err := metalAPI.DeviceEvents(n.t.Context(), n.deviceID)
	g.Expect(err).NotTo(HaveOccurred())
	states := map[string]int{}
	for _, e := range events {
		if e.HasState() {
			states[e.GetState()]++
		}
	}
	g.Expect(states).To(Equal(map[string]int{"running": count, state: count}), "the node's reports of device %s", n.deviceID)
}
