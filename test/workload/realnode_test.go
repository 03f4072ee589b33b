package workload

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/nodeagent"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

const (
	// realCluster is TestRealNodes' cluster; its devices' host
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
// API providers' e2e flavors patch theirs (docs/capp.md, "QuickStart with
// real nodes"): the node image has the software (Preinstalled); the
// kubelets on cgroupfs on this cgroup v1 host without systemd, without
// disk-pressure eviction or image garbage collection (the machines' roots
// are overlays on this host's disk, shared and often nearly full; no
// registry could give an image back); kubeadm's SystemVerification check
// ignored (it fails on cgroup v1); nothing pulled (the layer has the
// images and a machine reaches no registry); kube-proxy not sizing the
// conntrack table (a node's network namespace cannot, as the Docker
// provider's nodes); the API server advertised at the VLAN address; the
// public addresses routed through the VLAN's gateway; the pool one address
// short, for the device that is not on the VLAN; the route agent as the
// CNI the flavor's ClusterResourceSet applies; and the cloud controller
// manager's Secret naming the simulator.
var forThisHost = []func(*unstructured.Unstructured) error{
	func(obj *unstructured.Unstructured) error {
		switch obj.GetKind() {
		case "PacketMachineTemplate":
			if err := unstructured.SetNestedField(obj.Object, string(infrav1.NodeSoftwarePreinstalled), "spec", "template", "spec", "nodeSoftware"); err != nil {
				return err
			}
			return routePublicViaVLAN(obj)
		case "MetalVRFIPPool":
			return unstructured.SetNestedStringSlice(obj.Object, []string{realPool}, "spec", "addresses")
		case "Secret":
			if obj.GetName() == "metal-credentials" {
				return unstructured.SetNestedStringMap(obj.Object, map[string]string{"metal-cloud-config.yaml": ccmCloudConfig}, "stringData")
			}
		case "ConfigMap":
			if obj.GetName() == realCluster+"-cni" {
				return unstructured.SetNestedStringMap(obj.Object, map[string]string{"cni.yaml": routeAgentManifest}, "data")
			}
		case "KubeadmControlPlane":
			spec := []string{"spec", "kubeadmConfigSpec"}
			for _, phase := range []string{"initConfiguration", "joinConfiguration"} {
				if err := nodeRegistrationForThisHost(obj, append(spec, phase, "nodeRegistration")); err != nil {
					return err
				}
			}
			pre, _, err := unstructured.NestedStringSlice(obj.Object, append(spec, "preKubeadmCommands")...)
			if err != nil {
				return err
			}
			return unstructured.SetNestedStringSlice(obj.Object, append(pre, kubeProxyForThisHost, advertiseVLANAddress), append(spec, "preKubeadmCommands")...)
		case "KubeadmConfigTemplate":
			return nodeRegistrationForThisHost(obj, []string{"spec", "template", "spec", "joinConfiguration", "nodeRegistration"})
		}
		return nil
	},
}

// ccmImage is the cloud controller manager's image in the node layer
// (test/node/kubelayer.sh), which the flavor's Deployment names.
const ccmImage = "localhost/metal-vrf-ccm:test"

// ccmCloudConfig is the cloud controller manager's Secret in the
// credentials Secret the flavor's ClusterResourceSet carries: its baseURL
// is the simulator, which a machine reaches at the metadata service's
// address (the node agent forwards that address's port 80 to the
// simulator's listener, which serves the API beside the metadata). CAPP
// reads only the token of it.
var ccmCloudConfig = fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: metal-cloud-config\n  namespace: kube-system\nstringData:\n  %s: '{\"apiKey\": %q, \"baseURL\": \"http://%s\"}'\n",
	metal.CloudConfigKey, simtest.APIKey, metadataAddr)

// realPool is the nodes' pool of the real cluster: the flavor's range
// without 10.60.1.6, which the device off the VLAN takes (otherAddr).
const (
	realPool  = "10.60.1.2-10.60.1.5"
	otherAddr = "10.60.1.6/29"
)

// kubeProxyForThisHost appends kube-proxy's configuration to the one
// CABPK wrote for kubeadm init (a preKubeadmCommand runs before it; CABPK
// has no field for it): conntrack's table is not sized.
const kubeProxyForThisHost = `if [ -f /run/kubeadm/kubeadm.yaml ]; then printf '\n---\napiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nconntrack:\n  maxPerCore: 0\n' >> /run/kubeadm/kubeadm.yaml; fi`

// publicBlock is where the simulator takes public addresses, the
// cluster's endpoint among them (shared/metal/sim).
const publicBlock = "198.51.100.0/24"

// routePublicViaVLAN routes the public addresses through the nodes VLAN's
// gateway, with a route of the template's VLAN network (CAPP's network
// script writes it): this host emulates no public network (each
// machine's bond0 has the image's address, the same on all of them, and
// reaches nothing), so the worker reaches the endpoint as Cluster API's
// managers do, through the test's namespace.
func routePublicViaVLAN(obj *unstructured.Unstructured) error {
	path := []string{"spec", "template", "spec", "ports"}
	ports, _, err := unstructured.NestedSlice(obj.Object, path...)
	if err != nil {
		return err
	}
	if len(ports) != 1 {
		return fmt.Errorf("%d ports, the flavor has one", len(ports))
	}
	networks, _, err := unstructured.NestedSlice(ports[0].(map[string]any), "networks")
	if err != nil {
		return err
	}
	if len(networks) != 1 {
		return fmt.Errorf("%d networks on the port, the flavor has one", len(networks))
	}
	networks[0].(map[string]any)["routes"] = []any{map[string]any{"destination": publicBlock}}
	if err := unstructured.SetNestedSlice(ports[0].(map[string]any), networks, "networks"); err != nil {
		return err
	}
	return unstructured.SetNestedSlice(obj.Object, ports, path...)
}

// advertiseVLANAddress makes kubeadm init advertise the API server at the
// node's VLAN address, its InternalIP (CAPP's --node-ip, which CAPP's
// network script wrote before): kubeadm's default, the default route's
// address, is bond0's, here the image's, the same on every machine and
// reaching nothing, and the kubernetes Service's endpoint would be the
// worker's own bond0.
const advertiseVLANAddress = `. /etc/default/kubelet && sed -i "s/^localAPIEndpoint: {}$/localAPIEndpoint: {advertiseAddress: ${KUBELET_EXTRA_ARGS#--node-ip=}}/" /run/kubeadm/kubeadm.yaml`

// nodeRegistrationForThisHost edits the nodeRegistration at path.
func nodeRegistrationForThisHost(obj *unstructured.Unstructured, reg []string) error {
	args, _, err := unstructured.NestedSlice(obj.Object, append(reg, "kubeletExtraArgs")...)
	if err != nil {
		return err
	}
	args = append(args,
		map[string]any{"name": "cgroup-driver", "value": "cgroupfs"},
		map[string]any{"name": "fail-cgroupv1", "value": "false"},
		// 0% thresholds are none: no eviction for the disk's pressure.
		map[string]any{"name": "eviction-hard", "value": "imagefs.available<0%,imagefs.inodesFree<0%,nodefs.available<0%,nodefs.inodesFree<0%"},
		map[string]any{"name": "image-gc-high-threshold", "value": "100"},
		map[string]any{"name": "image-gc-low-threshold", "value": "99"})
	if err := unstructured.SetNestedSlice(obj.Object, args, append(reg, "kubeletExtraArgs")...); err != nil {
		return err
	}
	if err := unstructured.SetNestedStringSlice(obj.Object, []string{"SystemVerification"}, append(reg, "ignorePreflightErrors")...); err != nil {
		return err
	}
	return unstructured.SetNestedField(obj.Object, string(corev1.PullNever), append(reg, "imagePullPolicy")...)
}

// routeAgentImage is the route agent's image in the layer
// (test/node/kubelayer.sh); the Pods of the test run it too.
const routeAgentImage = "localhost/routeagent:test"

// routeAgentManifest is the CNI the flavor's ClusterResourceSet applies:
// the route agent (test/tools/routeagent) as a hostNetwork DaemonSet on
// every node, with the right to list Nodes. It writes each node's CNI
// configuration from its podCIDR and routes the other Nodes' podCIDRs via
// their InternalIPs.
const routeAgentManifest = `apiVersion: v1
kind: ServiceAccount
metadata:
  name: routeagent
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: routeagent
rules:
- apiGroups: [""]
  resources: [nodes]
  verbs: [list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: routeagent
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: routeagent
subjects:
- kind: ServiceAccount
  name: routeagent
  namespace: kube-system
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: routeagent
  namespace: kube-system
spec:
  selector:
    matchLabels:
      app: routeagent
  template:
    metadata:
      labels:
        app: routeagent
    spec:
      hostNetwork: true
      serviceAccountName: routeagent
      priorityClassName: system-node-critical
      tolerations:
      - operator: Exists
      containers:
      - name: routeagent
        image: ` + routeAgentImage + `
        imagePullPolicy: Never
        args: [/etc/cni/net.d]
        env:
        - name: NODE_NAME
          valueFrom:
            fieldRef:
              fieldPath: spec.nodeName
        # Routes in the node's network namespace.
        securityContext:
          privileged: true
        volumeMounts:
        - name: cni
          mountPath: /etc/cni/net.d
      volumes:
      - name: cni
        hostPath:
          path: /etc/cni/net.d
          type: DirectoryOrCreate
`

// TestRealNodes is QuickStart on real nodes: the default flavor, one
// control plane and one worker, whose devices the node agent boots as
// machines of this host (test/nodeagent: the node image, the Kubernetes
// layer, the device's user-data through cloud-init). Cluster API's kubeadm
// control plane and bootstrap providers write the bootstrap data, CAPP
// merges its network script and endpoint binding into it and creates the
// devices; kubeadm init runs on one, kubeadm join on the other. Cluster
// API's managers and the worker reach the API server at the cluster's
// endpoint: the test's namespace is the nodes VLAN's gateway (a veth into
// the VLAN's bridge) and routes the endpoint's address to the device the
// platform routes it to, whose lo has it (CAPP's endpoint binding). The
// flavor's ClusterResourceSet applies the CNI, the route agent. Both Nodes
// become Ready with their claims' addresses and their Machines' provider
// IDs; a Pod on the worker reaches a Pod on the control plane over the
// VLAN; kubeadm's CoreDNS, built into the layer, answers that Pod's
// resolver for the cluster's Services; a device of the project whose port
// is not on the VLAN reaches neither node. Deleting the Cluster leaves nothing in the simulator, on
// this host or in the management cluster. It runs when NODE_IMAGE names
// the node image (make test-workload builds it).
func TestRealNodes(t *testing.T) {
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
	var endpoint string
	g.Eventually(func(g Gomega) string { endpoint = r.cluster(ctx, g).Spec.ControlPlaneEndpoint.Host; return endpoint }).ShouldNot(BeEmpty())

	t.Log("the control plane's Machine gets its bootstrap data from Cluster API's kubeadm bootstrap provider; the node agent boots its device")
	cp := bootstrapped(ctx, g, r, true, "kubeadm init --config /run/kubeadm/kubeadm.yaml")
	cpm := agentMachine(g, agent, cp)
	var cpAddr string
	g.Eventually(func(g Gomega) string { cpAddr = r.addresses(ctx, g)[cp.Name]; return cpAddr }).Should(HavePrefix("10.60.1."))
	// The platform routes the endpoint to the control plane's device; the
	// test's namespace, the nodes' gateway, routes it there over the VLAN,
	// as the platform would over its own network: for Cluster API's
	// managers here and for the worker, whose default route is the VLAN's
	// gateway.
	g.Eventually(func(g Gomega) []string { return r.endpointRoutedTo(ctx, g) }).Should(Equal([]string{device.DeviceID(cp.Spec.ProviderID)}))
	g.Expect(ip("route", "replace", endpoint+"/32", "via", cpAddr, "dev", hostLink)).To(Succeed())
	t.Cleanup(func() { _ = ip("route", "del", endpoint+"/32") })
	started := time.Now()
	booted(g, cpm, 10*time.Minute)
	t.Logf("the control plane booted and ran kubeadm init in %s", time.Since(started).Round(time.Second))

	t.Log("once the control plane is initialized, the worker's Machine gets its join data; the node agent boots its device")
	worker := bootstrapped(ctx, g, r, false, "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml")
	wm := agentMachine(g, agent, worker)
	var addresses map[string]string
	g.Eventually(func(g Gomega) map[string]string { addresses = r.addresses(ctx, g); return addresses }).Should(HaveKeyWithValue(worker.Name, HavePrefix("10.60.1.")))
	workerAddr := addresses[worker.Name]
	g.Expect(addresses).To(HaveKeyWithValue(cp.Name, cpAddr))
	joinStarted := time.Now()
	booted(g, wm, 10*time.Minute)
	t.Logf("the worker booted and ran kubeadm join in %s", time.Since(joinStarted).Round(time.Second))
	g.Expect(cpm.File("/etc/kubernetes/admin.conf")).NotTo(BeEmpty())

	t.Log("both Nodes are Ready with their claims' addresses and their Machines' provider IDs, the route agent from the ClusterResourceSet routing the pod networks")
	cfg := workloadConfig(ctx, g, r.k8s, r.key)
	workload, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	podCIDRs := map[string]string{}
	for _, pair := range []struct {
		machine clusterv1.Machine
		m       *nodeagent.Machine
	}{{cp, cpm}, {worker, wm}} {
		machine, addr := pair.machine, addresses[pair.machine.Name]
		g.Eventually(func(g Gomega) {
			got := &clusterv1.Machine{}
			g.Expect(r.k8s.Get(ctx, client.ObjectKeyFromObject(&machine), got)).To(Succeed())
			g.Expect(got.Status.NodeRef.Name).To(Equal(pair.m.Hostname), "Machine %s's nodeRef", machine.Name)
			node := &corev1.Node{}
			g.Expect(workload.Get(ctx, client.ObjectKey{Name: got.Status.NodeRef.Name}, node)).To(Succeed())
			g.Expect(node.Spec.ProviderID).To(Equal(machine.Spec.ProviderID))
			g.Expect(node.Status.Addresses).To(ContainElement(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: addr}),
				"node %s's addresses, not its claim's address %s", node.Name, addr)
			g.Expect(node.Spec.PodCIDR).NotTo(BeEmpty(), "node %s has no podCIDR", node.Name)
			g.Expect(nodeReady(node)).To(HavePrefix("True"), "node %s is not Ready", node.Name)
			g.Expect(node.Spec.Taints).NotTo(ContainElement(HaveField("Key", "node.cloudprovider.kubernetes.io/uninitialized")),
				"node %s is not initialised by the cloud controller manager", node.Name)
			placedAsItsFailureDomain(ctx, g, r, got, node)
			podCIDRs[machine.Name] = node.Spec.PodCIDR
		}).WithTimeout(5*time.Minute).WithPolling(2*time.Second).Should(Succeed(), func() string {
			return kubeletLog(pair.m) + podsOf(ctx, workload)
		})
	}
	t.Logf("both Nodes Ready %s after the test started waiting for the boots", time.Since(started).Round(time.Second))
	g.Expect(workload.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "routeagent"}, &appsv1.DaemonSet{})).To(Succeed(),
		"the route agent's DaemonSet is the ClusterResourceSet's")
	g.Expect(nodeagent.IP("-n", wm.Netns, "route", "show", podCIDRs[cp.Name])).
		To(ContainSubstring("via "+cpAddr+" dev bond0.1001"), "the worker's route to the control plane's Pods")

	t.Log("kubectl get nodes -o wide, with the kubeconfig clusterctl gets for the Cluster, shows each Node Ready at its claim's address")
	kubeconfig := filepath.Join(suite.home, realCluster+".kubeconfig")
	out, err := testenv.RunTool("", suite.ctlEnv, suite.clusterctl, "get", "kubeconfig", realCluster, "-n", r.ns, "--kubeconfig", r.management.kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(kubeconfig, out, 0o600)).To(Succeed())
	nodes := kubectl(g, kubeconfig, "get", "nodes", "-o", "wide")
	g.Expect(nodeTable(nodes)).To(Equal(map[string][2]string{
		cpm.Hostname: {"Ready", cpAddr}, wm.Hostname: {"Ready", workerAddr},
	}), nodes)

	t.Log("the Cluster is Available, as QuickStart asks")
	g.Eventually(func(g Gomega) {
		cluster := r.cluster(ctx, g)
		g.Expect(conditions.IsTrue(cluster, clusterv1.AvailableCondition)).To(BeTrue(), "Available: %v", conditions.Get(cluster, clusterv1.AvailableCondition))
	}).WithTimeout(5 * time.Minute).Should(Succeed())

	t.Log("a Pod on the worker reaches a Pod on the control plane at its own address, over the VLAN")
	clientset, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	web := testPod("web", cpm.Hostname, corev1.RestartPolicyAlways, "serve", ":8080")
	web.Labels = map[string]string{"app": "web"}
	g.Expect(workload.Create(ctx, web)).To(Succeed())
	webIP := awaitPod(ctx, g, workload, web, corev1.PodRunning, func() string { return kubeletLog(cpm) })
	g.Expect(netip.MustParsePrefix(podCIDRs[cp.Name]).Contains(netip.MustParseAddr(webIP))).To(BeTrue(),
		"the web Pod's address %s is not of its node's podCIDR %s", webIP, podCIDRs[cp.Name])
	get := testPod("client", wm.Hostname, corev1.RestartPolicyNever, "get", "http://"+webIP+":8080/")
	g.Expect(workload.Create(ctx, get)).To(Succeed())
	logs := func() string {
		out, _ := clientset.CoreV1().Pods(get.Namespace).GetLogs(get.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		return string(out)
	}
	clientIP := awaitPod(ctx, g, workload, get, corev1.PodSucceeded, func() string { return "client's log: " + logs() + kubeletLog(wm) })
	g.Expect(netip.MustParsePrefix(podCIDRs[worker.Name]).Contains(netip.MustParseAddr(clientIP))).To(BeTrue(),
		"the client Pod's address %s is not of its node's podCIDR %s", clientIP, podCIDRs[worker.Name])
	g.Expect(logs()).To(Equal(web.Name+"\n"), "the client's answer is not the web Pod's (its host name)")

	clusterDNS(ctx, t, g, workload, clientset, web, wm)

	t.Log("a device of the project whose port is not on the VLAN reaches neither node; the worker does")
	om, removeOffVLAN := offVLAN(ctx, t, g, r, agent)
	g.Expect(ping(wm, cpAddr)).To(Succeed())
	g.Expect(ping(om, cpAddr)).NotTo(Succeed(), "a device off the VLAN reaches the control plane")
	g.Expect(ping(om, workerAddr)).NotTo(Succeed(), "a device off the VLAN reaches the worker")
	removeOffVLAN(g)

	t.Logf("the control plane's machine: %s; the worker's: %s", machineCost(cpm), machineCost(wm))
	if os.Getenv(keepEnv) != "" {
		keep(t, r, kubeconfig, nodes)
	}

	// What the machines have on this host, to check it is gone after.
	machines := []*nodeagent.Machine{cpm, wm}
	inodes := make([]uint64, len(machines))
	for i, m := range machines {
		var st syscall.Stat_t
		g.Expect(syscall.Stat(filepath.Join("/run/netns", m.Netns), &st)).To(Succeed())
		inodes[i] = st.Ino
	}
	deletion(ctx, t, r)
	t.Log("the devices' machines are gone, and nothing of them is left on this host")
	for i, m := range machines {
		g.Eventually(func() *nodeagent.Machine { return agent.Machine(m.DeviceID) }).WithTimeout(2*time.Minute).
			Should(BeNil(), "the machine of deleted device %s still runs", m.DeviceID)
		expectGone(g, m)
		g.Expect(processesIn(inodes[i])).To(BeEmpty())
	}
	g.Eventually(func() (string, error) { return nodeagent.IP("-n", agent.Fabric, "-o", "link", "show", "type", "veth") }).
		WithTimeout(30*time.Second).Should(MatchRegexp(`^\d+: gw@[^\n]*$`), "veths left in the fabric but the gateway's")
	for _, list := range []client.ObjectList{&clusterv1.MachineList{}, &infrav1.PacketMachineList{}, &bootstrapv1.KubeadmConfigList{},
		&controlplanev1.KubeadmControlPlaneList{}, &infrav1.PacketClusterList{}} {
		g.Expect(r.k8s.List(ctx, list, client.InNamespace(r.ns))).To(Succeed())
		g.Expect(list).To(HaveField("Items", BeEmpty()), "%T left in the management cluster", list)
	}
}

// keepEnv set (make run-cluster) keeps TestRealNodes' cluster up, once
// every check of it passed, until Ctrl-C (or SIGTERM); then the test deletes
// it and checks that nothing of it is left, as always.
const keepEnv = "WORKLOAD_KEEP"

// interrupted receives Ctrl-C when keepEnv is set (TestMain forwards it).
var interrupted = make(chan os.Signal, 1)

// keep prints how to reach the cluster and waits for Ctrl-C.
func keep(t *testing.T, r *run, kubeconfig, nodes string) {
	kubectl, _ := testenv.Tool("KUBECTL", "kubectl")
	t.Logf(`
The workload cluster runs until Ctrl-C: its nodes are machines of this host (ip netns list), its endpoint routed in the
test's network namespace, where the management cluster's API server listens too. Run kubectl and clusterctl there:
  nsenter --target %[1]d --net -- %[2]s --kubeconfig %[3]s get nodes -o wide
%[4]s
  nsenter --target %[1]d --net -- %[2]s --kubeconfig %[3]s get pods -A -o wide
  nsenter --target %[1]d --net -- %[5]s describe cluster %[6]s -n %[7]s --kubeconfig %[8]s --show-conditions all
  nsenter --target %[1]d --net -- %[2]s --kubeconfig %[8]s get ipaddressclaims,ipaddresses.ipam.cluster.x-k8s.io,packetmachines -n %[7]s
Ctrl-C deletes the Cluster and checks that nothing of it is left.`,
		os.Getpid(), kubectl, kubeconfig, strings.TrimRight(nodes, "\n"), suite.clusterctl, realCluster, r.ns, r.management.kubeconfig)
	<-interrupted
	t.Log("interrupted: deleting the Cluster")
}

// kubectl runs kubectl with the kubeconfig and returns its output.
func kubectl(g *WithT, kubeconfig string, args ...string) string {
	kubectl, err := testenv.Tool("KUBECTL", "kubectl")
	g.Expect(err).NotTo(HaveOccurred())
	out, err := testenv.RunTool("", nil, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	g.Expect(err).NotTo(HaveOccurred())
	return string(out)
}

// nodeTable reads kubectl get nodes -o wide: each node's STATUS and
// INTERNAL-IP.
func nodeTable(out string) map[string][2]string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	header := strings.Fields(lines[0])
	status, internal := slices.Index(header, "STATUS"), slices.Index(header, "INTERNAL-IP")
	table := map[string][2]string{}
	for _, line := range lines[1:] {
		if f := strings.Fields(line); len(f) > max(status, internal) && status >= 0 && internal >= 0 {
			table[f[0]] = [2]string{f[status], f[internal]}
		}
	}
	return table
}

// clusterDNS checks that kubeadm's CoreDNS addon, its image built from
// CoreDNS's module into the layer (test/tools/coredns), serves the cluster
// DNS: its Deployment is Available with its Pods Running, and a Pod on the
// worker's node m resolves the kubernetes Service and a Service of the web
// Pod by name (the resolv.conf the kubelet writes names the cluster DNS's
// Service) to their ClusterIPs, and fetches the web Pod's answer through
// the latter by its name.
func clusterDNS(ctx context.Context, t *testing.T, g *WithT, c client.Client, clientset kubernetes.Interface, web *corev1.Pod, m *nodeagent.Machine) {
	t.Helper()
	started := time.Now()
	t.Log("kubeadm's CoreDNS Deployment is Available, its Pods Running")
	g.Eventually(func(g Gomega) {
		dns := &appsv1.Deployment{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "coredns"}, dns)).To(Succeed())
		g.Expect(dns.Status.Conditions).To(ContainElement(And(HaveField("Type", appsv1.DeploymentAvailable), HaveField("Status", corev1.ConditionTrue))),
			"the coredns Deployment is not Available")
		pods := &corev1.PodList{}
		g.Expect(c.List(ctx, pods, client.InNamespace(metav1.NamespaceSystem), client.MatchingLabels(dns.Spec.Selector.MatchLabels))).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(int(*dns.Spec.Replicas)))
		for _, p := range pods.Items {
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "CoreDNS Pod %s on %s", p.Name, p.Spec.NodeName)
		}
	}).WithTimeout(3*time.Minute).WithPolling(2*time.Second).Should(Succeed(), func() string { return podsOf(ctx, c) })

	t.Log("a Pod on the worker resolves the kubernetes Service and the web Pod's Service through the cluster DNS, and reaches the web Pod by its Service's name")
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: web.Name, Namespace: web.Namespace},
		Spec: corev1.ServiceSpec{Selector: web.Labels,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	g.Expect(c.Create(ctx, svc)).To(Succeed())
	g.Expect(svc.Spec.ClusterIP).NotTo(BeEmpty())
	kube := &corev1.Service{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "kubernetes"}, kube)).To(Succeed())
	const kubeName = "kubernetes.default.svc.cluster.local"
	// Restarted until it succeeds: the Service's name and endpoints reach
	// CoreDNS and kube-proxy a moment after it is created.
	for _, check := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{testPod("resolve", m.Hostname, corev1.RestartPolicyOnFailure, "resolve", kubeName, svc.Name),
			fmt.Sprintf("%s %s\n%s %s\n", kubeName, kube.Spec.ClusterIP, svc.Name, svc.Spec.ClusterIP)},
		{testPod("fetch", m.Hostname, corev1.RestartPolicyOnFailure, "get", "http://"+svc.Name+"/"), web.Name + "\n"},
	} {
		g.Expect(c.Create(ctx, check.pod)).To(Succeed())
		logs := func() string {
			out, _ := clientset.CoreV1().Pods(check.pod.Namespace).GetLogs(check.pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			return string(out)
		}
		awaitPod(ctx, g, c, check.pod, corev1.PodSucceeded, func() string {
			return check.pod.Name + "'s log: " + logs() + podsOf(ctx, c) + kubeletLog(m)
		})
		g.Expect(logs()).To(Equal(check.want), "the %s Pod's answer", check.pod.Name)
	}
	t.Logf("the cluster DNS checked in %s", time.Since(started).Round(time.Second))
}

// bootstrapped waits for the namespace's control plane Machine (or its
// worker) to have bootstrap data and a device, and checks that the data is
// its KubeadmConfig's and runs command, and that the device's user-data is
// that data with CAPP's network script merged in.
func bootstrapped(ctx context.Context, g *WithT, r *run, controlPlane bool, command string) clusterv1.Machine {
	var machine clusterv1.Machine
	g.Eventually(func(g Gomega) {
		machines := &clusterv1.MachineList{}
		g.Expect(r.k8s.List(ctx, machines, client.InNamespace(r.ns))).To(Succeed())
		var found []clusterv1.Machine
		for _, m := range machines.Items {
			if _, ok := m.Labels[clusterv1.MachineControlPlaneLabel]; ok == controlPlane {
				found = append(found, m)
			}
		}
		g.Expect(found).To(HaveLen(1))
		machine = found[0]
		g.Expect(machine.Spec.Bootstrap.DataSecretName).NotTo(BeNil(), "Machine %s has no bootstrap data", machine.Name)
		g.Expect(machine.Spec.ProviderID).NotTo(BeEmpty(), "Machine %s has no device", machine.Name)
	}).WithTimeout(10 * time.Minute).Should(Succeed())
	g.Expect(machine.Spec.Bootstrap.ConfigRef.Kind).To(Equal("KubeadmConfig"))
	config := &bootstrapv1.KubeadmConfig{}
	g.Expect(r.k8s.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: machine.Spec.Bootstrap.ConfigRef.Name}, config)).To(Succeed())
	g.Expect(config.Status.DataSecretName).To(Equal(*machine.Spec.Bootstrap.DataSecretName))
	data := &corev1.Secret{}
	g.Expect(r.k8s.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: *machine.Spec.Bootstrap.DataSecretName}, data)).To(Succeed())
	g.Expect(data.OwnerReferences).To(ContainElement(HaveField("UID", config.UID)), "the bootstrap data is the KubeadmConfig's")
	g.Expect(string(data.Data["value"])).To(ContainSubstring(command))
	d, err := r.metalAPI.GetDevice(ctx, device.DeviceID(machine.Spec.ProviderID))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.GetUserdata()).To(And(ContainSubstring(command), ContainSubstring(cloudinit.ScriptPath)),
		"the device's user-data is CABPK's with CAPP's network script merged in")
	return machine
}

// ccmManager is the field manager of our cloud controller manager's
// writes (its binary's name, the prefix of its user agent).
const ccmManager = "metal-vrf-ccm"

// placedAsItsFailureDomain checks that the node's region and zone labels,
// set by the CCM, are where its Machine's failure domain placed the device.
// CAPP's failure domains are facilities of the cluster's metro or metros
// (the Cluster's status.failureDomains, attributes facility and metro):
// the region is the failure domain's metro and the zone its facility, or,
// for a metro failure domain, the facility of that metro the platform
// placed the device in. Both are also the device's own metro and facility,
// and a Machine without a failure domain has its cluster's metro.
func placedAsItsFailureDomain(ctx context.Context, g Gomega, r *run, machine *clusterv1.Machine, node *corev1.Node) {
	d, err := r.metalAPI.GetDevice(ctx, device.DeviceID(machine.Spec.ProviderID))
	g.Expect(err).NotTo(HaveOccurred())
	metro, facility := simtest.Metro, ""
	if name := machine.Spec.FailureDomain; name != "" {
		cluster := r.cluster(ctx, g)
		var fd *clusterv1.FailureDomain
		for i := range cluster.Status.FailureDomains {
			if cluster.Status.FailureDomains[i].Name == name {
				fd = &cluster.Status.FailureDomains[i]
			}
		}
		g.Expect(fd).NotTo(BeNil(), "Machine %s's failure domain %s is not one of the Cluster's", machine.Name, name)
		metro, facility = fd.Attributes["metro"], fd.Attributes["facility"]
	}
	g.Expect(node.Labels).To(HaveKeyWithValue(corev1.LabelTopologyRegion, metro),
		"node %s's region is its Machine's failure domain %q's metro", node.Name, machine.Spec.FailureDomain)
	g.Expect(node.Labels).To(HaveKeyWithValue(corev1.LabelTopologyRegion, d.Metro.GetCode()), "node %s's region is its device's metro", node.Name)
	g.Expect(d.Facility.GetCode()).To(HavePrefix(metro), "Machine %s's device is in a facility of its metro", machine.Name)
	if facility != "" {
		g.Expect(node.Labels).To(HaveKeyWithValue(corev1.LabelTopologyZone, facility),
			"node %s's zone is its Machine's failure domain %q's facility", node.Name, machine.Spec.FailureDomain)
	}
	g.Expect(node.Labels).To(HaveKeyWithValue(corev1.LabelTopologyZone, d.Facility.GetCode()),
		"node %s's zone is the facility its device was placed in (Machine %s, failure domain %q)", node.Name, machine.Name, machine.Spec.FailureDomain)
	for _, label := range []string{corev1.LabelTopologyRegion, corev1.LabelTopologyZone} {
		g.Expect(labelManagers(node, label)).To(ContainElement(ccmManager), "node %s's label %s is not the CCM's", node.Name, label)
	}
}

// labelManagers are the field managers that own a label of the node.
func labelManagers(node *corev1.Node, label string) []string {
	var out []string
	key := fmt.Sprintf(`"f:%s"`, label)
	for _, f := range node.ManagedFields {
		if f.FieldsV1 != nil && strings.Contains(string(f.FieldsV1.Raw), key) {
			out = append(out, f.Manager)
		}
	}
	return out
}

// booted waits until cloud-init ran the machine's user-data, kubeadm's
// command included, to success.
func booted(g *WithT, m *nodeagent.Machine, timeout time.Duration) {
	g.Eventually(func() error { _, err := m.File(nodeagent.BootDone); return err }).WithTimeout(timeout).WithPolling(2*time.Second).
		Should(Succeed(), func() string { return m.Console() })
	stages, _ := m.File(nodeagent.BootDone)
	g.Expect(strings.TrimSpace(stages)).To(MatchRegexp(`^init-local=0 init=0 config=\d+ final=0$`), func() string { return m.Console() + kubeletLog(m) })
	g.Expect(machineFile(m, "/run/cluster-api/bootstrap-success.complete")).To(Equal("success\n"), func() string { return m.Console() })
}

// agentMachine waits for the node agent's machine of machine's device.
func agentMachine(g *WithT, agent *nodeagent.Agent, machine clusterv1.Machine) *nodeagent.Machine {
	id := device.DeviceID(machine.Spec.ProviderID)
	g.Eventually(func() *nodeagent.Machine { return agent.Machine(id) }).WithTimeout(2*time.Minute).
		Should(Not(BeNil()), "no machine for device %s: %v", id, agent.Err())
	return agent.Machine(id)
}

// offVLAN creates a device of the project that no assignment batch puts on
// the nodes VLAN: the node agent boots it with its port's VLAN interface
// unwired, as it wires the nodes' only for their batches. It takes
// otherAddr on that interface, on the nodes' subnet, so that the VLAN is
// all that stands between it and them. remove deletes the device and
// checks that nothing of its machine is left; cleanup does if the test
// did not.
func offVLAN(ctx context.Context, t *testing.T, g *WithT, r *run, agent *nodeagent.Agent) (om *nodeagent.Machine, remove func(*WithT)) {
	t.Helper()
	d, err := r.metalAPI.CreateDevice(ctx, metal.DeviceRequest{Tag: "test:" + r.ns, Hostname: realPrefix + "other",
		Plan: "c3.small.x86", Metro: simtest.Metro, OperatingSystem: "ubuntu_24_04"})
	g.Expect(err).NotTo(HaveOccurred())
	removed := false
	remove = func(g *WithT) {
		removed = true
		g.Expect(r.metalAPI.DeleteDevice(context.Background(), d.GetId())).To(Succeed())
		g.Eventually(func() *nodeagent.Machine { return agent.Machine(d.GetId()) }).WithTimeout(2*time.Minute).
			Should(BeNil(), "the machine of deleted device %s still runs", d.GetId())
		if om != nil {
			expectGone(g, om)
		}
	}
	t.Cleanup(func() {
		if !removed {
			remove(NewWithT(t))
		}
	})
	g.Eventually(func() *nodeagent.Machine { om = agent.Machine(d.GetId()); return om }).WithTimeout(2*time.Minute).
		Should(Not(BeNil()), "no machine for device %s: %v", d.GetId(), agent.Err())
	vlan := fmt.Sprintf("bond0.%d", simtest.NodesVXLAN)
	g.Eventually(func() error { _, err := nodeagent.IP("-n", om.Netns, "link", "show", vlan); return err }).WithTimeout(time.Minute).Should(Succeed())
	g.Expect(ip("-n", om.Netns, "addr", "add", otherAddr, "dev", vlan)).To(Succeed())
	g.Expect(ip("-n", om.Netns, "link", "set", vlan, "up")).To(Succeed())
	return om, remove
}

// expectGone checks that nothing of machine m is left on this host: its
// network namespace, overlay and cgroups.
func expectGone(g *WithT, m *nodeagent.Machine) {
	g.Expect(filepath.Join("/run/netns", m.Netns)).NotTo(BeAnExistingFile())
	g.Expect(m.Upper).NotTo(BeAnExistingFile())
	g.Expect(m.Cgroups).NotTo(BeEmpty())
	for _, cg := range m.Cgroups {
		g.Expect(cg).NotTo(BeAnExistingFile())
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(mountinfo)).NotTo(ContainSubstring(filepath.Dir(m.Upper)))
}

// testPod is a Pod of the route agent's image on node, running it with
// args, tolerating every taint (the control plane's).
func testPod(name, node string, restart corev1.RestartPolicy, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: node, RestartPolicy: restart, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: name, Image: routeAgentImage, ImagePullPolicy: corev1.PullNever, Args: args}},
		},
	}
}

// awaitPod waits until pod is in phase, stopping at once if it failed, and
// returns its address.
func awaitPod(ctx context.Context, g *WithT, c client.Client, pod *corev1.Pod, phase corev1.PodPhase, describe func() string) string {
	var ip string
	g.Eventually(func(g Gomega) {
		got := &corev1.Pod{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
		if got.Status.Phase == corev1.PodFailed {
			StopTrying("the " + pod.Name + " Pod failed: " + got.Status.Message).Now()
		}
		g.Expect(got.Status.Phase).To(Equal(phase))
		ip = got.Status.PodIP
	}).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(Succeed(), describe)
	return ip
}

// podsOf lists the workload cluster's Pods with their phase and node, for
// failures.
func podsOf(ctx context.Context, c client.Client) string {
	list := &corev1.PodList{}
	if err := c.List(ctx, list); err != nil {
		return err.Error()
	}
	var b strings.Builder
	b.WriteString("\nPods:\n")
	for _, p := range list.Items {
		fmt.Fprintf(&b, "%s/%s %s %s %s\n", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Message)
	}
	return b.String()
}

// ping pings addr three times from machine m's network namespace.
func ping(m *nodeagent.Machine, addr string) error {
	out, err := exec.Command("ip", "netns", "exec", m.Netns, "ping", "-c", "3", "-i", "0.2", "-W", "1", addr).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s from %s: %w: %s", addr, m.Hostname, err, out)
	}
	return nil
}

// machineCost is what a machine cost this host (docs/benchmarks.md): its
// processes' resident memory, the peak with the page cache it filled, and
// the CPU time its processes used, from its cgroups.
func machineCost(m *nodeagent.Machine) string {
	read := func(path string) string { b, _ := os.ReadFile(path); return strings.TrimSpace(string(b)) }
	memory := filepath.Join("/sys/fs/cgroup/memory", m.Netns)
	rss := "?"
	if found := regexp.MustCompile(`(?m)^total_rss (\d+)$`).FindStringSubmatch(read(filepath.Join(memory, "memory.stat"))); found != nil {
		rss = found[1]
	}
	cpu := read(filepath.Join("/sys/fs/cgroup/cpuacct", m.Netns, "cpuacct.usage"))
	return fmt.Sprintf("rss %s bytes, peak with page cache %s bytes, CPU %s ns", rss, read(filepath.Join(memory, "memory.max_usage_in_bytes")), cpu)
}

// startAgent starts a node agent running the devices of TestRealNodes
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
// VLAN's bridge in the agent's fabric. It goes with the fabric. The
// namespace forwards, as a gateway: the worker's packets to the endpoint
// go out the way they came, to the control plane.
func gatewayToVLAN(t *testing.T, agent *nodeagent.Agent) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
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
