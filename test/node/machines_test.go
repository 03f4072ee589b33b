package node

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/nodeagent"
)

// machinePrefix names the devices the node agent of TestDevicesAreMachines
// runs: the qemu tests' devices, in the same project, are left to qemu.
const machinePrefix = "machine-"

// TestDevicesAreMachines runs three devices CAPP created, with the user-data
// it rendered, as machines on this host (test/nodeagent): a and b have
// bond0 on VLAN 1001 with addresses IPAM gave them and reach each other
// over the VLAN's bridge; c's bond0 is on VLAN 1003 only, and reaches
// neither, not even from an address of the subnet on its own bond0.1001,
// which no port assignment wires. Deleting the PacketMachines stops the
// machines and leaves nothing of them on the host.
func TestDevicesAreMachines(t *testing.T) {
	t.Parallel()
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	g := NewWithT(t)
	ctx := t.Context()
	agent := startAgent(t, machinePrefix)

	ns := newCluster(t, "machines", v1alpha1.MetalVRFIPPoolSpec{
		Addresses: []string{"10.60.1.2-10.60.1.4"}, Prefix: ptr.To[int32](29), Gateway: "10.60.1.1",
	})
	onVLAN := []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{nodesNetwork()}}}
	nodes := []*node{
		newMachine(t, ns, machinePrefix+"a", onVLAN),
		newMachine(t, ns, machinePrefix+"b", onVLAN),
		// The subnet's next address, on another VLAN.
		newMachine(t, ns, machinePrefix+"c", []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{{VXLAN: 1003, Address: "10.60.1.5/29"}}}}),
	}

	// Each machine boots and cloud-init runs its user-data to the end.
	machines := make([]*nodeagent.Machine, len(nodes))
	for i, n := range nodes {
		g.Eventually(func() *nodeagent.Machine { return agent.Machine(n.deviceID) }).WithTimeout(time.Minute).
			Should(Not(BeNil()), "no machine for device %s: %v", n.deviceID, agent.Err())
		m := agent.Machine(n.deviceID)
		g.Eventually(func() error { _, err := m.File(nodeagent.BootDone); return err }).WithTimeout(2*time.Minute).
			Should(Succeed(), func() string { return m.Console() })
		// The config stage fails on cc_locale alone: the image generates no
		// locales; the stages that run the user-data succeed.
		stages, _ := m.File(nodeagent.BootDone)
		g.Expect(strings.TrimSpace(stages)).To(MatchRegexp(`^init-local=0 init=0 config=\d+ final=0$`), m.Console())
		g.Expect(failedModules.FindAllStringSubmatch(m.Console(), -1)).To(HaveEach(HaveExactElements(Not(BeEmpty()), Equal("locale"))), m.Console())
		ran, err := m.File("/var/lib/bootstrap-ran")
		g.Expect(err).NotTo(HaveOccurred(), "the bootstrap's own command did not run:\n%s", m.Console())
		g.Expect(strings.TrimSpace(ran)).To(Equal(n.pm.Name))
		// The machine reported through the metadata service, as the
		// network script does on the platform.
		n.expectCondition(g, metav1.ConditionTrue, infrav1.NodeNetworkConfiguredReason, "network_configuration_success")
		machines[i] = m
	}

	// The network script put each IPAM address on bond0.1001.
	a, b, c := machines[0], machines[1], machines[2]
	addrA, addrB := claimedAddress(t, nodes[0]), claimedAddress(t, nodes[1])
	g.Expect(addrA).NotTo(Equal(addrB))
	g.Expect(ipAddr(t, a, "bond0.1001")).To(ContainElement(addrA + "/29"))
	g.Expect(ipAddr(t, b, "bond0.1001")).To(ContainElement(addrB + "/29"))
	g.Expect(ipAddr(t, c, "bond0.1003")).To(ContainElement("10.60.1.5/29"))

	g.Expect(ping(a, addrB)).To(Succeed(), "a does not reach b over VLAN 1001")
	g.Expect(ping(b, addrA)).To(Succeed(), "b does not reach a over VLAN 1001")
	g.Expect(ping(c, addrA)).NotTo(Succeed(), "c reaches a: its port is not on VLAN 1001")
	g.Expect(ping(a, "10.60.1.5")).NotTo(Succeed(), "a reaches c on VLAN 1003")
	// c's own bond0.1001 exists but no assignment wires it: an address of
	// the subnet on it reaches no one either.
	g.Expect(ipIn(c, "addr", "add", "10.60.1.6/29", "dev", "bond0.1001")).To(Succeed())
	g.Expect(ipIn(c, "link", "set", "bond0.1001", "up")).To(Succeed())
	g.Expect(ping(c, addrB, "-I", "bond0.1001")).NotTo(Succeed(), "c reaches b from its unassigned bond0.1001")

	// What each machine has on the host, to check it is gone after.
	netnsInodes := map[uint64]string{}
	for _, m := range machines {
		var st syscall.Stat_t
		g.Expect(syscall.Stat(filepath.Join("/run/netns", m.Netns), &st)).To(Succeed())
		netnsInodes[st.Ino] = m.Netns
	}
	for _, n := range nodes {
		g.Expect(env.Client.Delete(ctx, n.pm)).To(Succeed())
	}
	for i, n := range nodes {
		g.Eventually(func() *nodeagent.Machine { return agent.Machine(n.deviceID) }).WithTimeout(2*time.Minute).
			Should(BeNil(), "the machine of deleted device %s still runs", n.deviceID)
		m := machines[i]
		g.Expect(filepath.Join("/run/netns", m.Netns)).NotTo(BeAnExistingFile())
		g.Expect(m.Upper).NotTo(BeAnExistingFile())
		for _, cg := range m.Cgroups {
			g.Expect(cg).NotTo(BeAnExistingFile())
		}
	}
	// No process is left in a machine's network namespace (a process in it
	// would keep it, and its veths, alive), the fabric's bridges have no
	// ports left, and the fabric has no veth of a machine.
	g.Expect(processesIn(netnsInodes)).To(BeEmpty())
	g.Eventually(func() (string, error) { return nodeagent.IP("-n", agent.Fabric, "-o", "link", "show", "type", "veth") }).
		WithTimeout(30 * time.Second).Should(BeEmpty())
	for _, br := range []string{"br1001", "br1003"} {
		g.Expect(nodeagent.IP("-n", agent.Fabric, "-o", "link", "show", "master", br)).To(BeEmpty(), "ports left on %s", br)
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	g.Expect(err).NotTo(HaveOccurred())
	for _, m := range machines {
		g.Expect(string(mountinfo)).NotTo(ContainSubstring(filepath.Dir(m.Upper)))
	}

	// Closing the agent removes the fabric and the image's mount (another
	// test's agent may have its own meanwhile).
	g.Expect(agent.Close()).To(Succeed())
	g.Expect(filepath.Join("/run/netns", agent.Fabric)).NotTo(BeAnExistingFile())
	mountinfo, err = os.ReadFile("/proc/self/mountinfo")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(mountinfo)).NotTo(ContainSubstring(agent.Dir() + "/"))
	g.Expect(string(mountinfo)).NotTo(ContainSubstring("/run/netns/" + agent.Fabric + " "))
}

// failedModules finds the cloud-init modules that failed in a console.
var failedModules = regexp.MustCompile(`Running module (\w+) \(`)

// claimedAddress is the address IPAM gave the node's first network.
// startAgent starts a node agent that runs the devices whose host names
// start with prefix as machines of the node image with layers over it; the
// test's cleanup closes it.
func startAgent(t *testing.T, prefix string, layers ...string) *nodeagent.Agent {
	t.Helper()
	simURL, err := url.Parse(metalSim.URL)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := nodeagent.Start(nodeagent.Options{
		API: simtest.SDK(metalSim.URL, simtest.APIKey), Project: simtest.Project, Metro: simtest.Metro,
		Image: filepath.Join(imageDir, "rootfs.img"), Layers: layers, Metadata: simURL.Host,
		MetadataListen: guestfwdAddr + ":80", Bind: metalSim.BindNode,
		Select: func(d *metalv1.Device) bool { return strings.HasPrefix(d.GetHostname(), prefix) },
		Poll:   500 * time.Millisecond,
		Logf:   t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := agent.Close(); err != nil {
			t.Error(err)
		}
	})
	return agent
}

func claimedAddress(t *testing.T, n *node) string {
	t.Helper()
	g := NewWithT(t)
	claim := &ipamv1.IPAddressClaim{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: n.pm.Namespace, Name: controllers.ClaimName(n.pm.Name, 0, 0)}, claim)).To(Succeed())
	g.Expect(claim.Status.AddressRef.Name).NotTo(BeEmpty())
	addr := &ipamv1.IPAddress{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Namespace: n.pm.Namespace, Name: claim.Status.AddressRef.Name}, addr)).To(Succeed())
	return addr.Spec.Address
}

// ipAddr lists the addresses of dev in the machine's network namespace.
func ipAddr(t *testing.T, m *nodeagent.Machine, dev string) []string {
	t.Helper()
	out, err := nodeagent.IP("-n", m.Netns, "-o", "addr", "show", "dev", dev)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		for i := range f {
			if (f[i] == "inet" || f[i] == "inet6") && i+1 < len(f) {
				addrs = append(addrs, f[i+1])
			}
		}
	}
	return addrs
}

func ipIn(m *nodeagent.Machine, args ...string) error {
	_, err := nodeagent.IP(append([]string{"-n", m.Netns}, args...)...)
	return err
}

// ping sends three pings from the machine's network namespace, with ping's
// options opts (-I DEVICE: out of that interface, whatever the routes).
func ping(m *nodeagent.Machine, addr string, opts ...string) error {
	args := append([]string{"netns", "exec", m.Netns, "ping", "-c", "3", "-i", "0.2", "-W", "1"}, opts...)
	out, err := exec.Command("ip", append(args, addr)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s from %s: %w: %s", addr, m.Hostname, err, out)
	}
	return nil
}

// processesIn lists the processes of this host whose network namespace is
// one of inodes.
func processesIn(inodes map[uint64]string) []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, d := range dirs {
		var st syscall.Stat_t
		if syscall.Stat(d, &st) != nil {
			continue
		}
		if ns, ok := inodes[st.Ino]; ok {
			proc := filepath.Dir(filepath.Dir(d))
			cmdline, _ := os.ReadFile(filepath.Join(proc, "cmdline"))
			found = append(found, fmt.Sprintf("%s (%s) in %s", proc, strings.ReplaceAll(string(cmdline), "\x00", " "), ns))
		}
	}
	return found
}
