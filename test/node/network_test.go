package node

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/nodeagent"
)

// networkPrefix names the devices the node agent of TestPodNetwork runs.
const networkPrefix = "net-"

// bootstrapToken is the control plane's bootstrap token (the one CABPK
// generates and puts in both configurations): the worker's join
// discovers the cluster with it.
const bootstrapToken = "abcdef.0123456789abcdef"

// podSubnet is the cluster's pod network; kube-controller-manager gives each
// Node a /24 of it, which the route agent routes.
const podSubnet = "10.244.0.0/16"

// initBootstrap is a control plane's bootstrap data in the shape Cluster
// API's kubeadm bootstrap provider (CABPK) writes it (its Jinja header, the
// config in /run/kubeadm/kubeadm.yaml, its runcmd), with what this host
// needs: the cgroupfs driver on cgroup v1 (no systemd runs in a machine)
// and the SystemVerification check ignored (it fails on cgroup v1). Images
// are never pulled: the layer has the control plane's, and the machine
// reaches no registry. %[1]s is the Kubernetes version, kubeadm's own.
// Others join this control plane: its endpoint and advertised address are
// its VLAN address (%[2]s, the pool's
// first: the pool is the test's own and the control plane's claim its first;
// the test checks it), since bond0's address is the same on every machine
// (as the platform's public address is not, but nothing is routed to it
// here), the bootstrap token is fixed, and kube-proxy may not set the
// conntrack table's size (a node's network namespace cannot: as the Docker
// provider does). The machines' disk is this host's, shared and often
// nearly full: the kubelets (the worker's takes the init's configuration)
// neither evict Pods for its pressure nor collect the images, which no
// registry could give back. CoreDNS is skipped: nothing here resolves
// names (test/workload's TestRealNodes runs and checks it).
const initBootstrap = `## template: jinja
#cloud-config
write_files:
- path: /run/kubeadm/kubeadm.yaml
  owner: root:root
  permissions: '0640'
  content: |
    ---
    apiVersion: kubeadm.k8s.io/v1beta4
    kind: ClusterConfiguration
    kubernetesVersion: %[1]s
    clusterName: kubeadm
    controlPlaneEndpoint: %[2]s:6443
    networking:
      podSubnet: ` + podSubnet + `
      serviceSubnet: 10.96.0.0/12
    ---
    apiVersion: kubeadm.k8s.io/v1beta4
    kind: InitConfiguration
    bootstrapTokens:
    - token: ` + bootstrapToken + `
      ttl: 1h0m0s
    localAPIEndpoint:
      advertiseAddress: %[2]s
      bindPort: 6443
    skipPhases:
    - addon/coredns
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
    evictionHard:
      imagefs.available: 0%%
      imagefs.inodesFree: 0%%
      nodefs.available: 0%%
      nodefs.inodesFree: 0%%
    imageGCHighThresholdPercent: 100
    imageGCLowThresholdPercent: 99
    ---
    apiVersion: kubeproxy.config.k8s.io/v1alpha1
    kind: KubeProxyConfiguration
    conntrack:
      maxPerCore: 0
runcmd:
  - 'kubeadm init --config /run/kubeadm/kubeadm.yaml && mkdir -p /var/lib/cluster-api && echo success > /var/lib/cluster-api/bootstrap-success.complete'
`

// joinBootstrap is a worker's bootstrap data in the shape CABPK writes for
// a JoinConfiguration: discovery through the bootstrap token at the control
// plane's VLAN address (%[1]s), the cluster's CA pinned by its public key's
// hash (%[2]s). The kubelet's configuration comes from the cluster (the
// init's kubelet-config ConfigMap).
const joinBootstrap = `## template: jinja
#cloud-config
write_files:
- path: /run/kubeadm/kubeadm-join-config.yaml
  owner: root:root
  permissions: '0640'
  content: |
    ---
    apiVersion: kubeadm.k8s.io/v1beta4
    kind: JoinConfiguration
    discovery:
      bootstrapToken:
        apiServerEndpoint: %[1]s:6443
        token: ` + bootstrapToken + `
        caCertHashes:
        - sha256:%[2]s
    nodeRegistration:
      name: '{{ v1.local_hostname }}'
      imagePullPolicy: Never
      ignorePreflightErrors:
      - SystemVerification
    timeouts:
      kubeletHealthCheck: 10m0s
      kubernetesAPICall: 5m0s
runcmd:
  - 'kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml && mkdir -p /var/lib/cluster-api && echo success > /var/lib/cluster-api/bootstrap-success.complete'
`

// TestPodNetwork boots two devices CAPP created, a control plane and a
// worker, as machines on this host (test/nodeagent) with the Kubernetes
// layer (kubelayer.sh) over the node image, both with bond0 on VLAN 1001
// and an address from IPAM. On the control plane cloud-init runs kubeadm
// init, which runs etcd and the control plane as static Pods from the
// images built here, on containerd and runc; its API server answers on its
// IPAM address. The worker joins the control plane at its VLAN address with
// a bootstrap token, the route agent (test/tools/routeagent, a hostNetwork
// DaemonSet of an image the layer imports) gives each node its CNI
// configuration from the podCIDR kube-controller-manager allocated and
// routes the other's podCIDR via its InternalIP, and kube-proxy runs. Both
// Nodes become Ready with their IPAM addresses (CAPP's kubelet --node-ip:
// without it the kubelet would take the default route's address, bond0's),
// and a Pod on the worker
// reaches a Pod on the control plane at the Pod's own address: the
// worker's only route to it is via the control plane's VLAN address,
// across the VLAN's bridge. A third device, on VLAN 1003 only, reaches
// neither node. Deleting the PacketMachines leaves nothing.
func TestPodNetwork(t *testing.T) {
	t.Parallel()
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	g := NewWithT(t)
	ctx := t.Context()
	layer := filepath.Join(imageDir, "kube")
	version := kubeadmVersion(t, layer)
	agent := startAgent(t, networkPrefix, layer)

	ns := newCluster(t, "network", v1alpha1.MetalVRFIPPoolSpec{
		Addresses: []string{"10.60.1.2-10.60.1.4"}, Prefix: ptr.To[int32](29), Gateway: "10.60.1.1",
	})
	onVLAN := []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{nodesNetwork()}}}
	const cpAddr = "10.60.1.2"
	cpName, workerName := networkPrefix+"cp", networkPrefix+"worker"
	cp := newBootstrappedMachine(t, ns, cpName, fmt.Sprintf(initBootstrap, version, cpAddr), onVLAN)
	g.Expect(claimedAddress(t, cp)).To(Equal(cpAddr), "the control plane's bootstrap data names the pool's first address")

	started := time.Now()
	cpm := bootedMachine(t, agent, cp, 30*time.Minute)
	t.Logf("boot and kubeadm init took %s", time.Since(started).Round(time.Second))
	kubeconfig, err := cpm.File("/etc/kubernetes/admin.conf")
	g.Expect(err).NotTo(HaveOccurred())
	api := apiClient(t, cpm, kubeconfig, cpAddr)
	g.Expect(api.get("/readyz")).To(Equal("ok"), "the API server on the control plane's IPAM address")
	createRouteAgent(t, api)

	// The worker pins the CA kubeadm init made.
	caPEM, err := cpm.File("/etc/kubernetes/pki/ca.crt")
	g.Expect(err).NotTo(HaveOccurred())
	block, _ := pem.Decode([]byte(caPEM))
	g.Expect(block).NotTo(BeNil())
	ca, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	caHash := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	worker := newBootstrappedMachine(t, ns, workerName, fmt.Sprintf(joinBootstrap, cpAddr, hex.EncodeToString(caHash[:])), onVLAN)
	workerAddr := claimedAddress(t, worker)
	g.Expect(workerAddr).To(HavePrefix("10.60.1."))
	g.Expect(workerAddr).NotTo(Equal(cpAddr))
	other := newMachine(t, ns, networkPrefix+"other", []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{{VXLAN: 1003, Address: "10.60.1.5/29"}}}})

	started = time.Now()
	wm := bootedMachine(t, agent, worker, 30*time.Minute)
	t.Logf("the worker's boot and kubeadm join took %s", time.Since(started).Round(time.Second))
	om := agent.Machine(other.deviceID)
	g.Eventually(func() *nodeagent.Machine { om = agent.Machine(other.deviceID); return om }).WithTimeout(time.Minute).
		Should(Not(BeNil()), "no machine for device %s: %v", other.deviceID, agent.Err())

	// Both Nodes are Ready, each with its IPAM address and a podCIDR.
	podCIDRs := map[string]string{}
	for name, addr := range map[string]string{cpName: cpAddr, workerName: workerAddr} {
		g.Eventually(func(g Gomega) {
			node := &corev1.Node{}
			g.Expect(api.getJSON("/api/v1/nodes/"+name, node)).To(Succeed())
			g.Expect(node.Status.Addresses).To(ContainElement(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: addr}),
				"node %s's addresses, not its IPAM address %s", name, addr)
			g.Expect(node.Spec.PodCIDR).NotTo(BeEmpty(), "node %s has no podCIDR", name)
			g.Expect(node.Status.Conditions).To(ContainElement(And(
				HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))), "node %s is not Ready", name)
			podCIDRs[name] = node.Spec.PodCIDR
		}).WithTimeout(5*time.Minute).WithPolling(2*time.Second).Should(Succeed(), func() string {
			return kubeletLog(cpm) + kubeletLog(wm) + podsOf(api, "kube-system")
		})
	}
	t.Logf("both nodes Ready %s after the worker's machine started", time.Since(started).Round(time.Second))
	g.Expect(podCIDRs[cpName]).NotTo(Equal(podCIDRs[workerName]))
	// The worker's route to the control plane's Pods is the route agent's,
	// via the control plane's VLAN address.
	g.Expect(nodeagent.IP("-n", wm.Netns, "route", "show", podCIDRs[cpName])).
		To(ContainSubstring("via "+cpAddr+" dev bond0.1001"), "the worker's route to %s", podCIDRs[cpName])

	// A Pod on the worker reaches a Pod on the control plane at its own
	// address.
	toleratesAll := []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	web := testPod("web", cpName, corev1.RestartPolicyAlways, "serve", ":8080")
	web.Spec.Tolerations = toleratesAll
	g.Expect(api.post("/api/v1/namespaces/default/pods", web)).To(Succeed())
	webIP := awaitPod(g, api, "web", corev1.PodRunning, func() string { return kubeletLog(cpm) })
	g.Expect(netip.MustParsePrefix(podCIDRs[cpName]).Contains(netip.MustParseAddr(webIP))).To(BeTrue(),
		"the web Pod's address %s is not of its node's podCIDR %s", webIP, podCIDRs[cpName])
	g.Expect(api.post("/api/v1/namespaces/default/pods",
		testPod("client", workerName, corev1.RestartPolicyNever, "get", "http://"+webIP+":8080/"))).To(Succeed())
	clientIP := awaitPod(g, api, "client", corev1.PodSucceeded, func() string {
		log, _ := api.get("/api/v1/namespaces/default/pods/client/log")
		return "client's log: " + log + kubeletLog(wm)
	})
	g.Expect(netip.MustParsePrefix(podCIDRs[workerName]).Contains(netip.MustParseAddr(clientIP))).To(BeTrue(),
		"the client Pod's address %s is not of its node's podCIDR %s", clientIP, podCIDRs[workerName])
	g.Expect(api.get("/api/v1/namespaces/default/pods/client/log")).To(Equal("web\n"), "the client's answer is not the web Pod's")

	// The device not on VLAN 1001 reaches neither node.
	g.Expect(ping(om, cpAddr)).NotTo(Succeed(), "a device on VLAN 1003 reaches the control plane")
	g.Expect(ping(om, workerAddr)).NotTo(Succeed(), "a device on VLAN 1003 reaches the worker")

	t.Logf("the control plane's memory: %s; the worker's: %s", machineMemory(cpm), machineMemory(wm))

	// Deleting the PacketMachines leaves nothing of the machines.
	machines := []*nodeagent.Machine{cpm, wm, om}
	netnsInodes := map[uint64]string{}
	for _, m := range machines {
		var st syscall.Stat_t
		g.Expect(syscall.Stat(filepath.Join("/run/netns", m.Netns), &st)).To(Succeed())
		netnsInodes[st.Ino] = m.Netns
	}
	for _, n := range []*node{worker, other, cp} {
		g.Expect(env.Client.Delete(ctx, n.pm)).To(Succeed())
	}
	for _, n := range []*node{cp, worker, other} {
		g.Eventually(func() *nodeagent.Machine { return agent.Machine(n.deviceID) }).WithTimeout(2*time.Minute).
			Should(BeNil(), "the machine of deleted device %s still runs", n.deviceID)
	}
	for _, m := range machines {
		g.Expect(filepath.Join("/run/netns", m.Netns)).NotTo(BeAnExistingFile())
		g.Expect(m.Upper).NotTo(BeAnExistingFile())
		g.Expect(m.Cgroups).NotTo(BeEmpty())
		for _, cg := range m.Cgroups {
			g.Expect(cg).NotTo(BeAnExistingFile())
		}
	}
	g.Expect(processesIn(netnsInodes)).To(BeEmpty())
	g.Eventually(func() (string, error) { return nodeagent.IP("-n", agent.Fabric, "-o", "link", "show", "type", "veth") }).
		WithTimeout(30 * time.Second).Should(BeEmpty())
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	g.Expect(err).NotTo(HaveOccurred())
	for _, m := range machines {
		g.Expect(string(mountinfo)).NotTo(ContainSubstring(filepath.Dir(m.Upper)))
	}
}

// kubeadmVersion is the version of the layer's kubeadm.
func kubeadmVersion(t *testing.T, layer string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(layer, "usr/local/bin/kubeadm"), "version", "-o", "short").Output()
	if err != nil {
		t.Fatalf("the Kubernetes layer (make test-node builds it) has no kubeadm: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// bootedMachine waits for the machine of n's device and for cloud-init to
// have run its user-data, kubeadm's command included, to success.
func bootedMachine(t *testing.T, agent *nodeagent.Agent, n *node, timeout time.Duration) *nodeagent.Machine {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func() *nodeagent.Machine { return agent.Machine(n.deviceID) }).WithTimeout(time.Minute).
		Should(Not(BeNil()), "no machine for device %s: %v", n.deviceID, agent.Err())
	m := agent.Machine(n.deviceID)
	g.Eventually(func() error { _, err := m.File(nodeagent.BootDone); return err }).WithTimeout(timeout).WithPolling(time.Second).
		Should(Succeed(), func() string { return m.Console() })
	stages, _ := m.File(nodeagent.BootDone)
	g.Expect(strings.TrimSpace(stages)).To(MatchRegexp(`^init-local=0 init=0 config=\d+ final=0$`), func() string { return m.Console() + kubeletLog(m) })
	g.Expect(m.File("/var/lib/cluster-api/bootstrap-success.complete")).To(Equal("success\n"), m.Console())
	n.expectCondition(g, metav1.ConditionTrue, infrav1.NodeNetworkConfiguredReason, "network_configuration_success")
	return m
}

// kubeletLog is the end of the kubelet's log in the machine.
func kubeletLog(m *nodeagent.Machine) string {
	log, _ := m.File("/var/log/kubelet.log")
	if len(log) > 8000 {
		log = log[len(log)-8000:]
	}
	return "\nkubelet log (end):\n" + log
}

// machineMemory is what a machine costs this host (docs/benchmarks.md): its
// processes' resident memory, and the peak with the page cache it filled.
func machineMemory(m *nodeagent.Machine) string {
	memory := filepath.Join("/sys/fs/cgroup/memory", m.Netns)
	peak, _ := os.ReadFile(filepath.Join(memory, "memory.max_usage_in_bytes"))
	stat, _ := os.ReadFile(filepath.Join(memory, "memory.stat"))
	rss := "?"
	if found := regexp.MustCompile(`(?m)^total_rss (\d+)$`).FindStringSubmatch(string(stat)); found != nil {
		rss = found[1]
	}
	return fmt.Sprintf("rss %s bytes, peak with page cache %s bytes", rss, strings.TrimSpace(string(peak)))
}

// routeAgentImage is the route agent's image in the layer (kubelayer.sh).
const routeAgentImage = "localhost/routeagent:test"

// createRouteAgent creates the pod network: the route agent's DaemonSet on
// every node, with the host's network and the right to read Nodes.
func createRouteAgent(t *testing.T, api *api) {
	t.Helper()
	g := NewWithT(t)
	meta := metav1.ObjectMeta{Name: "routeagent", Namespace: "kube-system"}
	g.Expect(api.post("/api/v1/namespaces/kube-system/serviceaccounts", &corev1.ServiceAccount{ObjectMeta: meta})).To(Succeed())
	g.Expect(api.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "routeagent"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}}},
	})).To(Succeed())
	g.Expect(api.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "routeagent"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "routeagent"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "routeagent", Namespace: "kube-system"}},
	})).To(Succeed())
	labels := map[string]string{"app": "routeagent"}
	cni := "/etc/cni/net.d"
	g.Expect(api.post("/apis/apps/v1/namespaces/kube-system/daemonsets", &appsv1.DaemonSet{
		ObjectMeta: meta,
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork: true, ServiceAccountName: "routeagent", PriorityClassName: "system-node-critical",
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "routeagent", Image: routeAgentImage, ImagePullPolicy: corev1.PullNever,
						Args: []string{cni},
						Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"},
						}}},
						// Routes in the node's network namespace.
						SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
						VolumeMounts:    []corev1.VolumeMount{{Name: "cni", MountPath: cni}},
					}},
					Volumes: []corev1.Volume{{Name: "cni", VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: cni, Type: ptr.To(corev1.HostPathDirectoryOrCreate)},
					}}},
				},
			},
		},
	})).To(Succeed())
}

// testPod is a Pod of the route agent's image on node, running it with args.
func testPod(name, node string, restart corev1.RestartPolicy, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: node, RestartPolicy: restart,
			Containers: []corev1.Container{{Name: name, Image: routeAgentImage, ImagePullPolicy: corev1.PullNever, Args: args}},
		},
	}
}

// awaitPod waits until the Pod name of namespace default is in phase,
// stopping at once if it failed, and returns its address.
func awaitPod(g Gomega, a *api, name string, phase corev1.PodPhase, describe func() string) string {
	var ip string
	g.Eventually(func(g Gomega) {
		pod := &corev1.Pod{}
		g.Expect(a.getJSON("/api/v1/namespaces/default/pods/"+name, pod)).To(Succeed())
		if pod.Status.Phase == corev1.PodFailed {
			StopTrying("the " + name + " Pod failed: " + pod.Status.Message).Now()
		}
		g.Expect(pod.Status.Phase).To(Equal(phase))
		ip = pod.Status.PodIP
	}).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(Succeed(), describe)
	return ip
}

// podsOf lists a namespace's Pods with their phase and node, for failures.
func podsOf(a *api, ns string) string {
	list := &corev1.PodList{}
	if err := a.getJSON("/api/v1/namespaces/"+ns+"/pods", list); err != nil {
		return err.Error()
	}
	var b strings.Builder
	b.WriteString("\npods in " + ns + ":\n")
	for _, p := range list.Items {
		fmt.Fprintf(&b, "%s %s %s %s\n", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Message)
		for _, c := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "  %s ready=%t restarts=%d %+v\n", c.Name, c.Ready, c.RestartCount, c.State)
		}
	}
	return b.String()
}

// api reaches a machine's API server at one of its addresses.
type api struct {
	client *http.Client
	base   string
}

// apiClient talks to the API server of kubeconfig (kubeadm's admin.conf)
// at addr:6443 from inside the machine's network namespace. The client
// checks the server's certificate for the name "kubernetes", which
// kubeadm's certificate carries whatever address it advertises.
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

func (a *api) getJSON(path string, into any) error {
	body, err := a.get(path)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(body), into)
}

// post creates obj at path.
func (a *api) post(path string, obj any) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	resp, err := a.client.Post(a.base+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		out, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, out)
	}
	return nil
}
