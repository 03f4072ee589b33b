package workload

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/nodeagent"
)

const (
	// realCluster is TestRealControlPlane's cluster; its devices' host
	// names (their PacketMachines' names) start with realPrefix, which the
	// emulator leaves to the node agent.
	realCluster = "real"
	realPrefix  = realCluster + "-"
	// metadataAddr is where the nodes read the metadata service (CAPP's
	// user-data names it): each machine of the node agent has it on its lo,
	// forwarded to the simulator. Emulated nodes never read it.
	metadataAddr = "169.254.169.254"
	metadataURL  = "http://" + metadataAddr + "/metadata"
	// gatewayAddr is the nodes VLAN's gateway (renderFlavor's
	// NODE_NETWORK_GATEWAY): the test's namespace takes it on a veth into
	// the VLAN's bridge, and routes the endpoint through it.
	gatewayAddr = "10.60.1.1/29"
	// hostLink is the test namespace's end of that veth.
	hostLink = "realgw0"
)

// forThisHost are the edits a test flavor makes to the default flavor so
// that its nodes boot as machines of this host (test/nodeagent), as Cluster
// API providers' e2e flavors patch theirs (docs/capp.md, "A control plane
// from Cluster API's bootstrap data"): no worker; the node image has the
// software (Preinstalled); the kubelet on cgroupfs on this cgroup v1 host
// without systemd; kubeadm's SystemVerification check ignored (it fails on
// cgroup v1); nothing pulled (the layer has the control plane's images and
// a machine reaches no registry).
var forThisHost = []func(*unstructured.Unstructured) error{
	func(obj *unstructured.Unstructured) error {
		switch obj.GetKind() {
		case "MachineDeployment":
			return unstructured.SetNestedField(obj.Object, int64(0), "spec", "replicas")
		case "PacketMachineTemplate":
			return unstructured.SetNestedField(obj.Object, string(infrav1.NodeSoftwarePreinstalled), "spec", "template", "spec", "nodeSoftware")
		case "KubeadmControlPlane":
			for _, phase := range []string{"initConfiguration", "joinConfiguration"} {
				reg := []string{"spec", "kubeadmConfigSpec", phase, "nodeRegistration"}
				args, _, err := unstructured.NestedSlice(obj.Object, append(reg, "kubeletExtraArgs")...)
				if err != nil {
					return err
				}
				args = append(args,
					map[string]any{"name": "cgroup-driver", "value": "cgroupfs"},
					map[string]any{"name": "fail-cgroupv1", "value": "false"})
				if err := unstructured.SetNestedSlice(obj.Object, args, append(reg, "kubeletExtraArgs")...); err != nil {
					return err
				}
				if err := unstructured.SetNestedStringSlice(obj.Object, []string{"SystemVerification"}, append(reg, "ignorePreflightErrors")...); err != nil {
					return err
				}
				if err := unstructured.SetNestedField(obj.Object, string(corev1.PullNever), append(reg, "imagePullPolicy")...); err != nil {
					return err
				}
			}
		}
		return nil
	},
}

// TestRealControlPlane brings the default flavor's control plane up on a
// real node: Cluster API's kubeadm control plane and bootstrap providers
// write the bootstrap data, CAPP merges its network script into it and
// creates the device, and the node agent boots that device as a machine of
// this host (test/nodeagent: the node image, the Kubernetes layer, the
// user-data through cloud-init), where kubeadm init runs. The management
// side (Cluster API's managers, this test) reaches the API server at the
// cluster's endpoint: the test's namespace is the nodes VLAN's gateway (a
// veth into the VLAN's bridge) and routes the endpoint's address to the
// device the platform routes it to, whose lo has it (CAPP's endpoint
// binding). Deleting the Cluster leaves nothing in the simulator, on this
// host or in the management cluster. It runs when NODE_IMAGE names the
// node image (make test-workload builds it).
func TestRealControlPlane(t *testing.T) {
	t.Parallel()
	image := os.Getenv("NODE_IMAGE")
	if image == "" {
		t.Skip("NODE_IMAGE is not set: make test-workload builds the node image and sets it")
	}
	g := newG(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	agent := startAgent(t, image)
	gatewayToVLAN(t, agent)

	r := createCluster(ctx, t, g, realCluster, "", forThisHost...)
	cluster := r.cluster(ctx, g)
	endpoint := cluster.Spec.ControlPlaneEndpoint.Host
	if endpoint == "" {
		g.Eventually(func(g Gomega) {
			cluster = r.cluster(ctx, g)
			g.Expect(cluster.Spec.ControlPlaneEndpoint.Host).NotTo(BeEmpty())
		}).Should(Succeed())
		endpoint = cluster.Spec.ControlPlaneEndpoint.Host
	}

	t.Log("the control plane's Machine gets its bootstrap data from Cluster API's kubeadm bootstrap provider")
	var machine clusterv1.Machine
	g.Eventually(func(g Gomega) {
		machines := r.controlPlaneMachines(ctx, g)
		g.Expect(machines).To(HaveLen(1))
		machine = machines[0]
		g.Expect(machine.Spec.Bootstrap.DataSecretName).NotTo(BeNil())
		g.Expect(machine.Spec.ProviderID).NotTo(BeEmpty())
	}).Should(Succeed())
	g.Expect(machine.Spec.Bootstrap.ConfigRef.Kind).To(Equal("KubeadmConfig"))
	config := &bootstrapv1.KubeadmConfig{}
	g.Expect(r.k8s.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: machine.Spec.Bootstrap.ConfigRef.Name}, config)).To(Succeed())
	g.Expect(config.Status.DataSecretName).To(Equal(*machine.Spec.Bootstrap.DataSecretName))
	data := &corev1.Secret{}
	g.Expect(r.k8s.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: *machine.Spec.Bootstrap.DataSecretName}, data)).To(Succeed())
	g.Expect(data.OwnerReferences).To(ContainElement(HaveField("UID", config.UID)), "the bootstrap data is the KubeadmConfig's")
	g.Expect(string(data.Data["value"])).To(ContainSubstring("kubeadm init --config /run/kubeadm/kubeadm.yaml"))
	deviceID := device.DeviceID(machine.Spec.ProviderID)
	d, err := r.metalAPI.GetDevice(ctx, deviceID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.GetUserdata()).To(And(ContainSubstring("kubeadm init --config /run/kubeadm/kubeadm.yaml"), ContainSubstring(cloudinit.ScriptPath)),
		"the device's user-data is CABPK's with CAPP's network script merged in")

	t.Log("the node agent boots the device; cloud-init runs kubeadm init")
	g.Eventually(func() *nodeagent.Machine { return agent.Machine(deviceID) }).WithTimeout(2*time.Minute).
		Should(Not(BeNil()), "no machine for device %s: %v", deviceID, agent.Err())
	m := agent.Machine(deviceID)
	var addr string
	g.Eventually(func(g Gomega) string { addr = r.addresses(ctx, g)[machine.Name]; return addr }).Should(HavePrefix("10.60.1."))
	// The platform routes the endpoint to the control plane's device; the
	// test's namespace routes it there over the VLAN, as the platform would
	// over its own network.
	g.Eventually(func(g Gomega) []string { return r.endpointRoutedTo(ctx, g) }).Should(Equal([]string{deviceID}))
	g.Expect(ip("route", "replace", endpoint+"/32", "via", addr, "dev", hostLink)).To(Succeed())
	t.Cleanup(func() { _ = ip("route", "del", endpoint+"/32") })

	started := time.Now()
	g.Eventually(func() error { _, err := m.File(nodeagent.BootDone); return err }).WithTimeout(20*time.Minute).WithPolling(2*time.Second).
		Should(Succeed(), func() string { return m.Console() })
	t.Logf("boot and kubeadm init took %s", time.Since(started).Round(time.Second))
	stages, _ := m.File(nodeagent.BootDone)
	g.Expect(strings.TrimSpace(stages)).To(MatchRegexp(`^init-local=0 init=0 config=\d+ final=0$`), func() string { return m.Console() + kubeletLog(m) })
	g.Expect(machineFile(m, "/run/cluster-api/bootstrap-success.complete")).To(Equal("success\n"), func() string { return m.Console() })
	g.Expect(m.File("/etc/kubernetes/admin.conf")).NotTo(BeEmpty())

	t.Log("the KubeadmControlPlane reports the control plane initialized, through the endpoint")
	g.Eventually(func(g Gomega) {
		kcp := &controlplanev1.KubeadmControlPlane{}
		g.Expect(r.k8s.Get(ctx, r.kcpKey(), kcp)).To(Succeed())
		g.Expect(ptr.Deref(kcp.Status.Initialization.ControlPlaneInitialized, false)).To(BeTrue())
		cluster := r.cluster(ctx, g)
		g.Expect(conditions.IsTrue(cluster, clusterv1.ClusterControlPlaneInitializedCondition)).To(BeTrue(),
			"ControlPlaneInitialized: %v", conditions.Get(cluster, clusterv1.ClusterControlPlaneInitializedCondition))
	}).WithTimeout(5 * time.Minute).Should(Succeed())

	t.Log("the Node registers with the IPAM address as its InternalIP, and the Machine has it")
	workload := workloadClient(ctx, g, r.k8s, r.key)
	g.Eventually(func(g Gomega) {
		node := &corev1.Node{}
		g.Expect(workload.Get(ctx, client.ObjectKey{Name: m.Hostname}, node)).To(Succeed())
		g.Expect(node.Spec.ProviderID).To(Equal(machine.Spec.ProviderID))
		g.Expect(node.Status.Addresses).To(ContainElement(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: addr}),
			"the Node's addresses, not the IPAM address %s", addr)
		got := &clusterv1.Machine{}
		g.Expect(r.k8s.Get(ctx, client.ObjectKeyFromObject(&machine), got)).To(Succeed())
		g.Expect(got.Status.NodeRef.Name).To(Equal(node.Name))
	}).WithTimeout(5*time.Minute).Should(Succeed(), func() string { return kubeletLog(m) })

	// Not asserted (no CNI is built, and the CCM's image is not in the
	// layer): what the addons left of the Node, for docs/capp.md.
	node := &corev1.Node{}
	if err := workload.Get(ctx, client.ObjectKey{Name: m.Hostname}, node); err == nil {
		t.Logf("the Node's taints: %v; Ready: %v", node.Spec.Taints, nodeReady(node))
	}
	pods := &corev1.PodList{}
	if err := workload.List(ctx, pods, client.InNamespace("kube-system")); err == nil {
		for _, p := range pods.Items {
			t.Logf("workload pod %s: %s", p.Name, p.Status.Phase)
		}
	}

	// What the machine has on this host, to check it is gone after.
	var st syscall.Stat_t
	g.Expect(syscall.Stat(filepath.Join("/run/netns", m.Netns), &st)).To(Succeed())
	deletion(ctx, t, r)
	t.Log("the device's machine is gone, and nothing of it is left on this host")
	g.Eventually(func() *nodeagent.Machine { return agent.Machine(deviceID) }).WithTimeout(2*time.Minute).
		Should(BeNil(), "the machine of deleted device %s still runs", deviceID)
	g.Expect(filepath.Join("/run/netns", m.Netns)).NotTo(BeAnExistingFile())
	g.Expect(m.Upper).NotTo(BeAnExistingFile())
	g.Expect(m.Cgroups).NotTo(BeEmpty())
	for _, cg := range m.Cgroups {
		g.Expect(cg).NotTo(BeAnExistingFile())
	}
	g.Expect(processesIn(st.Ino)).To(BeEmpty())
	g.Eventually(func() (string, error) { return nodeagent.IP("-n", agent.Fabric, "-o", "link", "show", "type", "veth") }).
		WithTimeout(30*time.Second).Should(MatchRegexp(`^\d+: gw@[^\n]*$`), "veths left in the fabric but the gateway's")
	for _, list := range []client.ObjectList{&clusterv1.MachineList{}, &infrav1.PacketMachineList{}, &bootstrapv1.KubeadmConfigList{},
		&controlplanev1.KubeadmControlPlaneList{}, &infrav1.PacketClusterList{}} {
		g.Expect(r.k8s.List(ctx, list, client.InNamespace(r.ns))).To(Succeed())
		g.Expect(list).To(HaveField("Items", BeEmpty()), "%T left in the management cluster", list)
	}
}

// startAgent starts a node agent running the devices of TestRealControlPlane
// as machines of the node image in dir, with its Kubernetes layer. Its
// cleanup closes it and checks that the fabric, the test namespace's veth
// into it and the image's mount are gone.
func startAgent(t *testing.T, dir string) *nodeagent.Agent {
	t.Helper()
	simURL, err := url.Parse(suite.simURL)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := nodeagent.Start(nodeagent.Options{
		API: simtest.SDK(suite.simURL, simtest.APIKey), Project: simtest.Project, Metro: simtest.Metro,
		Image: filepath.Join(dir, "rootfs.img"), Layers: []string{filepath.Join(dir, "kube")}, Metadata: simURL.Host,
		MetadataListen: metadataAddr + ":80", Bind: suite.sim.BindNode,
		Select: func(d *metalv1.Device) bool { return strings.HasPrefix(d.GetHostname(), realPrefix) },
		Poll:   500 * time.Millisecond,
		Logf:   t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g := NewWithT(t)
		g.Expect(agent.Close()).To(Succeed())
		g.Expect(filepath.Join("/run/netns", agent.Fabric)).NotTo(BeAnExistingFile())
		// The kernel destroys the fabric's namespace, and the veth with it,
		// after ip netns del returns.
		g.Eventually(func() error { return ip("link", "show", hostLink) }).WithTimeout(30*time.Second).
			ShouldNot(Succeed(), "the gateway's veth is left")
		mountinfo, err := os.ReadFile("/proc/self/mountinfo")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(mountinfo)).NotTo(ContainSubstring(agent.Dir() + "/"))
	})
	return agent
}

// gatewayToVLAN makes the test's namespace (where Cluster API's managers
// run) the nodes VLAN's gateway: a veth whose other end is a port of the
// VLAN's bridge in the agent's fabric. It goes with the fabric.
func gatewayToVLAN(t *testing.T, agent *nodeagent.Agent) {
	t.Helper()
	bridge := fmt.Sprintf("br%d", simtest.NodesVXLAN)
	for _, args := range [][]string{
		{"link", "add", hostLink, "type", "veth", "peer", "name", "gw", "netns", agent.Fabric},
		{"-n", agent.Fabric, "link", "add", bridge, "type", "bridge"},
		{"-n", agent.Fabric, "link", "set", bridge, "up"},
		{"-n", agent.Fabric, "link", "set", "gw", "master", bridge, "up"},
		{"addr", "add", gatewayAddr, "dev", hostLink},
		{"link", "set", hostLink, "up"},
	} {
		if err := ip(args...); err != nil {
			t.Fatal(err)
		}
	}
}

func ip(args ...string) error {
	_, err := nodeagent.IP(args...)
	return err
}

// machineFile reads a file of the machine as its processes see it (/run is
// a tmpfs of its own mount namespace, not in its overlay): through the root
// of one of its processes.
func machineFile(m *nodeagent.Machine, path string) (string, error) {
	procs, err := os.ReadFile(filepath.Join(m.Cgroups[0], "cgroup.procs"))
	if err != nil {
		return "", err
	}
	err = fmt.Errorf("no process of machine %s sees %s", m.Hostname, path)
	for _, pid := range strings.Fields(string(procs)) {
		if data, readErr := os.ReadFile(filepath.Join("/proc", pid, "root", path)); readErr == nil {
			return string(data), nil
		}
	}
	return "", err
}

// kubeletLog is the end of the kubelet's log in the machine.
func kubeletLog(m *nodeagent.Machine) string {
	log, _ := m.File("/var/log/kubelet.log")
	if len(log) > 8000 {
		log = log[len(log)-8000:]
	}
	return "\nkubelet log (end):\n" + log
}

// processesIn lists the processes of this host in the network namespace
// of inode.
func processesIn(inode uint64) []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, d := range dirs {
		var st syscall.Stat_t
		if syscall.Stat(d, &st) == nil && st.Ino == inode {
			cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(d)), "cmdline"))
			found = append(found, fmt.Sprintf("%s (%s)", d, strings.ReplaceAll(string(cmdline), "\x00", " ")))
		}
	}
	return found
}

// nodeReady is the message of the Node's Ready condition.
func nodeReady(node *corev1.Node) string {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return fmt.Sprintf("%s (%s)", c.Status, c.Message)
		}
	}
	return "unknown"
}
