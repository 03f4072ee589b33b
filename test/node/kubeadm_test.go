package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/nodeagent"
)

// kubeadmPrefix names the devices the node agent of TestKubeadmInit runs.
const kubeadmPrefix = "kubeadm-"

// kubeadmBootstrap is a control plane's bootstrap data in the shape Cluster
// API's kubeadm bootstrap provider writes it (its Jinja header, the config
// in /run/kubeadm/kubeadm.yaml, its runcmd), with what this host needs:
// the cgroupfs driver on cgroup v1 (no systemd runs in a machine) and the
// SystemVerification check ignored (it fails on cgroup v1). Images are
// never pulled: the layer has the control plane's, and the machine reaches
// no registry (with kubeadm's default policy, its preflight would try to
// pull the kube-proxy and CoreDNS images, which it has not). %s is the
// Kubernetes version, kubeadm's own.
const kubeadmBootstrap = `## template: jinja
#cloud-config
write_files:
- path: /run/kubeadm/kubeadm.yaml
  owner: root:root
  permissions: '0640'
  content: |
    ---
    apiVersion: kubeadm.k8s.io/v1beta4
    kind: ClusterConfiguration
    kubernetesVersion: %s
    clusterName: kubeadm
    networking:
      podSubnet: 192.168.0.0/16
      serviceSubnet: 10.96.0.0/12
    ---
    apiVersion: kubeadm.k8s.io/v1beta4
    kind: InitConfiguration
    nodeRegistration:
      name: '{{ v1.local_hostname }}'
      imagePullPolicy: Never
      ignorePreflightErrors:
      - SystemVerification
    timeouts:
      controlPlaneComponentHealthCheck: 10m0s
      kubeletHealthCheck: 10m0s
      kubernetesAPICall: 5m0s
    ---
    apiVersion: kubelet.config.k8s.io/v1beta1
    kind: KubeletConfiguration
    cgroupDriver: cgroupfs
    failCgroupV1: false
    failSwapOn: false
runcmd:
  - 'kubeadm init --config /run/kubeadm/kubeadm.yaml && mkdir -p /var/lib/cluster-api && echo success > /var/lib/cluster-api/bootstrap-success.complete'
`

// TestKubeadmInit boots a device CAPP created, with a control plane's
// bootstrap data, as a machine on this host (test/nodeagent) with the
// Kubernetes layer (kubelayer.sh) over the node image: cloud-init runs
// kubeadm init, which runs etcd and the control plane as static Pods from
// the images built here, on containerd and runc. bond0 itself has the
// image's address and the default route, as the public network has on the
// platform (kubeadm advertises that address); VLAN 1001 carries the node's
// InternalIP from IPAM. The API server answers on the IPAM address and the
// Node registers with it: CAPP's kubelet --node-ip (without it the kubelet
// would take the default route's address). Deleting the PacketMachine leaves nothing of the
// machine, its containers included.
func TestKubeadmInit(t *testing.T) {
	t.Parallel()
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	g := NewWithT(t)
	ctx := t.Context()
	layer := filepath.Join(imageDir, "kube")
	version, err := exec.Command(filepath.Join(layer, "usr/local/bin/kubeadm"), "version", "-o", "short").Output()
	g.Expect(err).NotTo(HaveOccurred(), "the Kubernetes layer (make test-node builds it) has no kubeadm")
	agent := startAgent(t, kubeadmPrefix, layer)

	ns := newCluster(t, "kubeadm", v1alpha1.MetalVRFIPPoolSpec{
		Addresses: []string{"10.60.1.2-10.60.1.4"}, Prefix: ptr.To[int32](29), Gateway: "10.60.1.1",
	})
	n := newBootstrappedMachine(t, ns, kubeadmPrefix+"cp", fmt.Sprintf(kubeadmBootstrap, strings.TrimSpace(string(version))),
		[]infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{nodesNetwork()}}})

	g.Eventually(func() *nodeagent.Machine { return agent.Machine(n.deviceID) }).WithTimeout(time.Minute).
		Should(Not(BeNil()), "no machine for device %s: %v", n.deviceID, agent.Err())
	m := agent.Machine(n.deviceID)
	started := time.Now()
	g.Eventually(func() error { _, err := m.File(nodeagent.BootDone); return err }).WithTimeout(30*time.Minute).WithPolling(time.Second).
		Should(Succeed(), func() string { return m.Console() })
	t.Logf("boot and kubeadm init took %s", time.Since(started).Round(time.Second))
	stages, _ := m.File(nodeagent.BootDone)
	g.Expect(strings.TrimSpace(stages)).To(MatchRegexp(`^init-local=0 init=0 config=\d+ final=0$`), func() string { return m.Console() + kubeletLog(m) })
	g.Expect(m.File("/var/lib/cluster-api/bootstrap-success.complete")).To(Equal("success\n"), m.Console())
	n.expectCondition(g, metav1.ConditionTrue, infrav1.NodeNetworkConfiguredReason, "network_configuration_success")

	// The API server answers on the IPAM address, reached from the
	// machine's network namespace with admin.conf's credentials.
	addr := claimedAddress(t, n)
	g.Expect(addr).To(HavePrefix("10.60.1."))
	kubeconfig, err := m.File("/etc/kubernetes/admin.conf")
	g.Expect(err).NotTo(HaveOccurred())
	api := apiClient(t, m, kubeconfig, addr)
	g.Expect(api.get("/readyz")).To(Equal("ok"))
	g.Eventually(func(g Gomega) {
		body, err := api.get("/api/v1/nodes/" + kubeadmPrefix + "cp")
		g.Expect(err).NotTo(HaveOccurred())
		node := &corev1.Node{}
		g.Expect(json.Unmarshal([]byte(body), node)).To(Succeed())
		g.Expect(node.Status.Addresses).To(ContainElement(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: addr}),
			"the Node's addresses, not the IPAM address %s", addr)
	}).WithTimeout(5*time.Minute).WithPolling(2*time.Second).Should(Succeed(), func() string { return kubeletLog(m) })
	// What the control plane node costs this host (docs/benchmarks.md):
	// its processes' memory, and the peak with the page cache it filled.
	memory := filepath.Join("/sys/fs/cgroup/memory", m.Netns)
	peak, _ := os.ReadFile(filepath.Join(memory, "memory.max_usage_in_bytes"))
	stat, _ := os.ReadFile(filepath.Join(memory, "memory.stat"))
	rss := "?"
	if found := regexp.MustCompile(`(?m)^total_rss (\d+)$`).FindStringSubmatch(string(stat)); found != nil {
		rss = found[1]
	}
	t.Logf("the machine's memory: rss %s bytes, peak with page cache %s bytes", rss, strings.TrimSpace(string(peak)))

	// Deleting the PacketMachine stops the machine: nothing of it, its
	// containers' processes and cgroups included, is left.
	var st syscall.Stat_t
	g.Expect(syscall.Stat(filepath.Join("/run/netns", m.Netns), &st)).To(Succeed())
	g.Expect(env.Client.Delete(ctx, n.pm)).To(Succeed())
	g.Eventually(func() *nodeagent.Machine { return agent.Machine(n.deviceID) }).WithTimeout(2*time.Minute).
		Should(BeNil(), "the machine of deleted device %s still runs", n.deviceID)
	g.Expect(filepath.Join("/run/netns", m.Netns)).NotTo(BeAnExistingFile())
	g.Expect(m.Upper).NotTo(BeAnExistingFile())
	g.Expect(m.Cgroups).NotTo(BeEmpty())
	for _, cg := range m.Cgroups {
		g.Expect(cg).NotTo(BeAnExistingFile())
	}
	g.Expect(processesIn(map[uint64]string{st.Ino: m.Netns})).To(BeEmpty())
	g.Eventually(func() (string, error) { return ipOut("-n", agent.Fabric, "-o", "link", "show", "type", "veth") }).
		WithTimeout(30 * time.Second).Should(BeEmpty())
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(mountinfo)).NotTo(ContainSubstring(filepath.Dir(m.Upper)))
}

// kubeletLog is the end of the kubelet's log in the machine.
func kubeletLog(m *nodeagent.Machine) string {
	log, _ := m.File("/var/log/kubelet.log")
	if len(log) > 8000 {
		log = log[len(log)-8000:]
	}
	return "\nkubelet log (end):\n" + log
}

// api reaches a machine's API server at one of its addresses.
type api struct {
	client *http.Client
	base   string
}

// apiClient talks to the API server of kubeconfig (kubeadm's admin.conf)
// at addr:6443 from inside the machine's network namespace. The server's
// certificate names the advertised address, not addr: the client checks
// it for the name "kubernetes", which kubeadm's certificate carries too.
// Connections are not kept: an open one would keep the namespace alive.
func apiClient(t *testing.T, m *nodeagent.Machine, kubeconfig, addr string) *api {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ServerName = "kubernetes"
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &api{
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			DialContext: m.Dial, TLSClientConfig: tlsConfig, DisableKeepAlives: true,
			TLSHandshakeTimeout: 10 * time.Second, Proxy: nil,
		}},
		base: "https://" + addr + ":6443",
	}
}

func (a *api) get(path string) (string, error) {
	resp, err := a.client.Get(a.base + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return string(body), nil
}
