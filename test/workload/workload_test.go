package workload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/workload/emulator"
)

// inNamespace marks the test process that runs in the network namespace
// TestMain made for it.
const inNamespace = "WORKLOAD_TEST_NETNS"

// TestMain runs the tests in a network namespace of their own (unshare
// --net, as root): the emulator binds clusters' endpoints to its lo, and
// the namespace, with whatever it bound, disappears with the process.
// Everything else (envtest's API server, the managers, the simulator) runs
// there too, on its loopback interface.
func TestMain(m *testing.M) {
	if os.Getenv(inNamespace) == "" {
		if os.Getenv("REQUIRE_WORKLOAD") == "" {
			fmt.Println("skipping the workload cluster tests: run them with `make test-workload` (REQUIRE_WORKLOAD=1, as root)")
			os.Exit(0)
		}
		cmd := exec.Command("unshare", append([]string{"--net", "--", os.Args[0]}, os.Args[1:]...)...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), inNamespace+"=1")
		// The processes the tests start (API servers, managers) stay in
		// the test's process group: killed with it, should a test panic
		// or time out before its cleanup ran.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		err := cmd.Start()
		if err == nil {
			stopForwarding := forwardInterrupts(cmd.Process)
			err = cmd.Wait()
			stopForwarding()
		}
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		if err != nil {
			if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
				os.Exit(exit.ExitCode())
			}
			fmt.Fprintf(os.Stderr, "running the tests in a network namespace of their own (unshare --net needs root): %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	for _, args := range namespaceNetwork {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "setting the namespace's network up: ip %v: %v: %s\n", args, err, out)
			os.Exit(1)
		}
	}
	if os.Getenv(keepEnv) != "" {
		signal.Notify(interrupted, os.Interrupt, syscall.SIGTERM)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	code, err := runSuite(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// forwardInterrupts passes Ctrl-C and SIGTERM on to the tests' process when
// a cluster is kept (make run-cluster): the terminal sends them to its
// process group, this process's, and the tests run in a group of their own;
// they tear their cluster down before they exit. Otherwise a signal ends
// this process as it always did.
func forwardInterrupts(tests *os.Process) (stop func()) {
	if os.Getenv(keepEnv) == "" {
		return func() {}
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-signals:
				_ = tests.Signal(sig)
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(signals); close(done) }
}

// namespaceNetwork are the ip commands that set the namespace's network up:
// lo, and a default route through a veth pair of the namespace's own
// (192.0.2.0/24, TEST-NET-1), without which kube-apiserver finds no address
// to advertise. The simulator's public addresses (198.51.100.0/24) are
// unreachable but where the emulator binds them to lo: a connection to an
// endpoint the platform does not route fails at once.
var namespaceNetwork = [][]string{
	{"link", "set", "lo", "up"},
	{"link", "add", "wl0", "type", "veth", "peer", "name", "wl1"},
	{"addr", "add", "192.0.2.1/24", "dev", "wl0"},
	{"link", "set", "wl0", "up"},
	{"link", "set", "wl1", "up"},
	{"route", "add", "default", "via", "192.0.2.2", "dev", "wl0"},
	{"route", "add", "unreachable", "198.51.100.0/24"},
}

const (
	// clusterName is TestDefaultFlavor's cluster's name; each test's
	// cluster has a name of its own (the devices' tag).
	clusterName = "wl"
	version     = "v1.36.3"
)

// failureDomains are the facilities the test's PacketCluster lists as its
// failure domains (facilities of the simulator's metro, simtest.Metro), so
// that KubeadmControlPlane spreads its machines over them.
var failureDomains = []string{simtest.Metro + "11", simtest.Metro + "12", simtest.Metro + "13"}

// TestDefaultFlavor runs Cluster API's e2e specs on one cluster of the
// default flavor, one after the other, as sub-tests (one cluster saves the
// minute each would spend coming up): QuickStart (Available, nodes, the
// ClusterResourceSets' objects in the workload cluster), MachineDeployment
// scale 1 -> 3 -> 1 and a rollout, KubeadmControlPlane scale 1 -> 3 -> 1
// over three facilities, clusterctl move to a second management cluster
// and a scale there, and the deletion that ends QuickStart. The one change
// to the flavor: its PacketCluster lists three facilities as failure
// domains. Each step needs the state the previous one left, so the first
// that fails ends the test (the cluster is then deleted in cleanup).
func TestDefaultFlavor(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The move's target starts while the cluster comes up on the source.
	target := startTarget(ctx, t)
	r := createCluster(ctx, t, g, clusterName, "", withFailureDomains(failureDomains))
	runSteps(ctx, t, r, []step{
		{"QuickStart", quickStart},
		{"MachineDeploymentScale", machineDeploymentScale},
		{"MachineDeploymentRollout", machineDeploymentRollout},
		{"KubeadmControlPlaneScale", kubeadmControlPlaneScale},
		{"ClusterctlMove", func(ctx context.Context, t *testing.T, r *run) { clusterctlMove(ctx, t, r, target) }},
		{"Deletion", deletion},
	})
}

// step is one spec run on a test's cluster.
type step struct {
	name string
	run  func(context.Context, *testing.T, *run)
}

// runSteps runs the steps as sub-tests, stopping at the first that fails.
func runSteps(ctx context.Context, t *testing.T, r *run, steps []step) {
	for _, step := range steps {
		if !t.Run(step.name, func(t *testing.T) { step.run(ctx, t, r) }) {
			t.FailNow()
		}
	}
}

// newG is a Gomega of t with the test's waits.
func newG(t *testing.T) *WithT {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(4 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(time.Second)
	return g
}

// frameworkG is newG for a step that calls Cluster API's framework, which
// asserts with the global Gomega: it makes that fail t. The tests run in
// parallel, so only TestDefaultFlavor's steps may call the framework.
func frameworkG(t *testing.T) *WithT {
	RegisterTestingT(t)
	return newG(t)
}

// wait is how long the framework's helpers wait, as their intervals.
var wait = []any{"4m", "1s"}

// quickStart is QuickStart's assertions: the Cluster Available, the control
// plane initialised, every Machine with a node; and part 4 of issue 32: the
// objects the flavor's ClusterResourceSets carry exist in the workload
// cluster, read through the kubeconfig Cluster API wrote (the in-memory API
// server stores any kind), and the emulated cloud controller initialised
// the nodes.
func quickStart(ctx context.Context, t *testing.T, r *run) {
	g := newG(t)
	t.Log("the Cluster becomes Available")
	cluster := &clusterv1.Cluster{}
	g.Eventually(func(g Gomega) {
		g.Expect(r.k8s.Get(ctx, r.key, cluster)).To(Succeed())
		g.Expect(conditions.IsTrue(cluster, clusterv1.AvailableCondition)).To(BeTrue(), "Available: %v", conditions.Get(cluster, clusterv1.AvailableCondition))
	}).Should(Succeed())
	kcp := &controlplanev1.KubeadmControlPlane{}
	g.Expect(r.k8s.Get(ctx, r.kcpKey(), kcp)).To(Succeed())
	g.Expect(ptr.Deref(kcp.Status.Initialization.ControlPlaneInitialized, false)).To(BeTrue(), "the KubeadmControlPlane is initialised")

	t.Log("both Machines have nodes")
	machines := &clusterv1.MachineList{}
	g.Eventually(func(g Gomega) {
		g.Expect(r.k8s.List(ctx, machines, client.InNamespace(r.ns))).To(Succeed())
		g.Expect(machines.Items).To(HaveLen(2))
		for _, m := range machines.Items {
			g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue(), "Machine %s has a nodeRef", m.Name)
		}
	}).Should(Succeed())

	t.Log("the ClusterResourceSets applied the CNI and the cloud controller manager to the workload cluster, which (emulated) initialised the nodes")
	workload := workloadClient(ctx, g, r.k8s, r.key)
	g.Eventually(func(g Gomega) {
		g.Expect(workload.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "cni"}, &corev1.ConfigMap{})).To(Succeed())
		g.Expect(workload.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "metal-cloud-config"}, &corev1.Secret{})).To(Succeed())
		g.Expect(workload.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "metal-vrf-ccm"}, &appsv1.Deployment{})).To(Succeed())
		nodes := &corev1.NodeList{}
		g.Expect(workload.List(ctx, nodes)).To(Succeed())
		g.Expect(nodes.Items).To(HaveLen(2))
		for _, n := range nodes.Items {
			g.Expect(n.Spec.Taints).NotTo(ContainElement(HaveField("Key", "node.cloudprovider.kubernetes.io/uninitialized")), "node %s is initialised", n.Name)
			g.Expect(n.Status.Addresses).To(ContainElement(HaveField("Type", corev1.NodeInternalIP)), "node %s has its InternalIP", n.Name)
		}
	}).Should(Succeed())
	addresses := r.addresses(ctx, g)
	g.Expect(addresses).To(HaveLen(2), "one address on the nodes VLAN per Machine")
	t.Log("each node's InternalIP is its Machine's address from the pool")
	for _, m := range machines.Items {
		node := &corev1.Node{}
		g.Expect(workload.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
		g.Expect(node.Status.Addresses).To(ContainElement(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: addresses[m.Name]}),
			"node %s of Machine %s", node.Name, m.Name)
	}
}

// machineDeploymentScale is Cluster API's MachineDeployment scale spec,
// 1 -> 3 -> 1, with the framework's helper, and checks the addresses: the
// new machines get addresses of their own, the removed machines' are
// released (their IPAddresses and IPAddressClaims gone).
func machineDeploymentScale(ctx context.Context, t *testing.T, r *run) {
	g := frameworkG(t)
	before := r.addresses(ctx, g)
	scale := func(replicas int32) map[string]string {
		t.Logf("scaling the MachineDeployment to %d", replicas)
		framework.ScaleAndWaitMachineDeployment(ctx, framework.ScaleAndWaitMachineDeploymentInput{
			ClusterProxy: r.management.proxy(), Cluster: r.cluster(ctx, g), MachineDeployment: r.machineDeployment(ctx, g),
			Replicas: replicas, WaitForMachineDeployments: wait,
		})
		return r.expectAddressesOfMachines(ctx, g, 1+int(replicas))
	}
	up := scale(3)
	for m, a := range before {
		g.Expect(up).To(HaveKeyWithValue(m, a), "Machine %s keeps its address", m)
	}
	g.Expect(slices.Compact(slices.Sorted(maps.Values(up)))).To(HaveLen(4), "each Machine has an address of its own")
	down := scale(1)
	r.released = map[string]bool{}
	for m, a := range up {
		if _, kept := down[m]; !kept {
			r.released[a] = true
		}
	}
	g.Expect(r.released).To(HaveLen(2), "the two removed machines' addresses were released")
	t.Logf("addresses: before %v, at 3 %v, at 1 %v", before, up, down)
}

// machineDeploymentRollout changes the MachineDeployment's template (a new
// PacketMachineTemplate, the framework's helper) and checks that the new
// machine reuses an address the scale-down released and that the old
// machine's address is released once it is gone.
func machineDeploymentRollout(ctx context.Context, t *testing.T, r *run) {
	g := frameworkG(t)
	before := r.addresses(ctx, g)
	md := r.machineDeployment(ctx, g)
	t.Log("rolling the MachineDeployment out to a new PacketMachineTemplate")
	framework.UpgradeMachineDeploymentInfrastructureRefAndWait(ctx, framework.UpgradeMachineDeploymentInfrastructureRefAndWaitInput{
		ClusterProxy: r.management.proxy(), Cluster: r.cluster(ctx, g), MachineDeployments: []*clusterv1.MachineDeployment{md},
		WaitForMachinesToBeUpgraded: wait,
	})
	t.Log("the old machine goes, its address with it; the new one reuses a released address")
	addresses := r.expectAddressesOfMachines(ctx, g, 2)
	var old, replacement string
	for m, a := range before {
		if _, ok := addresses[m]; !ok {
			old = a
		}
	}
	for m, a := range addresses {
		if _, ok := before[m]; !ok {
			replacement = a
		}
	}
	t.Logf("the old worker's address %s released, the new worker's %s", old, replacement)
	g.Expect(old).NotTo(BeEmpty(), "the old worker is gone")
	g.Expect(r.released).To(HaveKey(replacement), "the new worker's address %s is one the scale-down released", replacement)
	g.Expect(slices.Collect(maps.Values(addresses))).NotTo(ContainElement(old), "the old worker's address is released")
}

// kubeadmControlPlaneScale is Cluster API's KubeadmControlPlane scale spec,
// 1 -> 3 -> 1, with the framework's helper, over the PacketCluster's three
// facilities: each control-plane Machine in a failure domain of its own,
// its device in that facility. The scale-down removes the two control
// planes that joined (cluster.x-k8s.io/delete-machine): the first holds the
// endpoint's address, which nothing moves (docs/workload.md).
func kubeadmControlPlaneScale(ctx context.Context, t *testing.T, r *run) {
	g := frameworkG(t)
	before := r.addresses(ctx, g)
	kcpKey := r.kcpKey()
	first := r.controlPlaneMachines(ctx, g)
	g.Expect(first).To(HaveLen(1))
	t.Log("scaling the KubeadmControlPlane to 3")
	kcp := &controlplanev1.KubeadmControlPlane{}
	g.Expect(r.k8s.Get(ctx, kcpKey, kcp)).To(Succeed())
	framework.ScaleAndWaitControlPlane(ctx, framework.ScaleAndWaitControlPlaneInput{
		ClusterProxy: r.management.proxy(), Cluster: r.cluster(ctx, g), ControlPlane: kcp, Replicas: 3, WaitForControlPlane: wait,
	})
	machines := r.controlPlaneMachines(ctx, g)
	g.Expect(machines).To(HaveLen(3))
	devices := r.devicesByProviderID(ctx, g)
	facilities := map[string]bool{}
	for _, m := range machines {
		g.Expect(failureDomains).To(ContainElement(m.Spec.FailureDomain), "Machine %s is in one of the cluster's failure domains", m.Name)
		d, ok := devices[m.Spec.ProviderID]
		g.Expect(ok).To(BeTrue(), "Machine %s's device %s exists", m.Name, m.Spec.ProviderID)
		g.Expect(d.Facility.GetCode()).To(Equal(m.Spec.FailureDomain), "Machine %s's device is in its failure domain's facility", m.Name)
		facilities[d.Facility.GetCode()] = true
		t.Logf("Machine %s: failure domain %s, device %s in facility %s", m.Name, m.Spec.FailureDomain, d.GetId(), d.Facility.GetCode())
	}
	g.Expect(facilities).To(HaveLen(3), "each control-plane device in a facility of its own")
	r.expectAddressesOfMachines(ctx, g, 4)

	// The first control plane's device holds the endpoint's address: the
	// scale-down removes it (and one that joined), as a rollout removes
	// the oldest, so the address must go to the one that stays.
	keep := machines[slices.IndexFunc(machines, func(m clusterv1.Machine) bool { return m.Name != first[0].Name })]
	t.Logf("scaling the KubeadmControlPlane back to 1, removing the endpoint's holder %s; %s stays", first[0].Name, keep.Name)
	for _, m := range machines {
		if m.Name == keep.Name {
			continue
		}
		patch := client.MergeFrom(m.DeepCopy())
		m.Annotations = mergeMap(m.Annotations, map[string]string{clusterv1.DeleteMachineAnnotation: ""})
		g.Expect(r.k8s.Patch(ctx, &m, patch)).To(Succeed())
	}
	g.Expect(r.k8s.Get(ctx, kcpKey, kcp)).To(Succeed())
	framework.ScaleAndWaitControlPlane(ctx, framework.ScaleAndWaitControlPlaneInput{
		ClusterProxy: r.management.proxy(), Cluster: r.cluster(ctx, g), ControlPlane: kcp, Replicas: 1, WaitForControlPlane: wait,
	})
	g.Eventually(func(g Gomega) {
		g.Expect(r.controlPlaneMachines(ctx, g)).To(ConsistOf(HaveField("Name", keep.Name)))
	}).Should(Succeed())
	after := r.expectAddressesOfMachines(ctx, g, 2)
	delete(before, first[0].Name)
	before[keep.Name] = after[keep.Name]
	g.Expect(after).To(Equal(before), "the removed control planes' addresses are released")
	g.Eventually(func(g Gomega) []string { return r.endpointRoutedTo(ctx, g) }).Should(Equal([]string{device.DeviceID(keep.Spec.ProviderID)}),
		"the endpoint's address routed to the control plane that stayed")
	g.Eventually(func(g Gomega) {
		cluster := r.cluster(ctx, g)
		g.Expect(conditions.IsTrue(cluster, clusterv1.AvailableCondition)).To(BeTrue(), "Available: %v", conditions.Get(cluster, clusterv1.AvailableCondition))
	}).Should(Succeed())
}

// endpointRoutedTo reads, through the SDK, the devices the platform routes
// the cluster's endpoint address to.
func (r *run) endpointRoutedTo(ctx context.Context, g Gomega) []string {
	pc := &infrav1.PacketCluster{}
	g.Expect(r.k8s.Get(ctx, r.key, pc)).To(Succeed())
	res, err := r.metalAPI.GetIPReservation(ctx, pc.Annotations[infrav1.EndpointReservationAnnotation])
	g.Expect(err).NotTo(HaveOccurred())
	var ids []string
	for _, a := range res.GetAssignments() {
		ids = append(ids, path.Base(a.AssignedTo.GetHref()))
	}
	return ids
}

// deletion ends QuickStart: deleting the Cluster takes everything back, in
// the platform (devices, the endpoint's reservation) and in the management
// cluster (IPAddresses, IPAddressClaims), and the endpoint is unbound.
func deletion(ctx context.Context, t *testing.T, r *run) {
	g := newG(t)
	cluster := r.cluster(ctx, g)
	eip, err := netip.ParseAddr(cluster.Spec.ControlPlaneEndpoint.Host)
	g.Expect(err).NotTo(HaveOccurred())
	t.Log("deleting the Cluster takes everything back")
	g.Expect(r.k8s.Delete(ctx, cluster)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(r.devicesByProviderID(ctx, g)).To(BeEmpty(), "devices left")
		reservations, err := r.metalAPI.ListPublicIPv4Reservations(ctx, device.ClusterTagPrefix+r.name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(reservations).To(BeEmpty(), "public address reservations left")
		addresses := &ipamv1.IPAddressList{}
		g.Expect(r.k8s.List(ctx, addresses, client.InNamespace(r.ns))).To(Succeed())
		g.Expect(addresses.Items).To(BeEmpty(), "IPAddresses left")
		claims := &ipamv1.IPAddressClaimList{}
		g.Expect(r.k8s.List(ctx, claims, client.InNamespace(r.ns))).To(Succeed())
		g.Expect(claims.Items).To(BeEmpty(), "IPAddressClaims left")
		g.Expect(r.k8s.Get(ctx, r.key, &clusterv1.Cluster{})).NotTo(Succeed(), "the Cluster is gone")
	}).Should(Succeed())
	g.Eventually(func() (bool, error) { return emulator.Loopback{}.Bound(eip) }).Should(BeFalse(), "the endpoint is unbound once its devices are gone")
}

// TestUnreachableEndpointKeepsTheWorkerOut shows a fault the emulator
// catches: a worker whose discovery endpoint the platform does not route to
// the control plane never becomes a node. The control plane comes up; the
// Cluster is not Available (WorkersAvailable), the worker Machine gets no
// nodeRef, and the emulator says why. The cluster is then deleted, which
// takes everything back all the same.
func TestUnreachableEndpointKeepsTheWorkerOut(t *testing.T) {
	t.Parallel()
	g := newG(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	const name = "unreachable"
	unrouted := netip.MustParseAddr("198.51.100.250")
	// The other tests' clusters come up beside this one: only this
	// cluster's devices (hostnames are their PacketMachines' names) are
	// changed, and only their refusals count.
	var ours sync.Map
	amend := func(d emulator.Device) emulator.Device {
		if !strings.HasPrefix(d.Hostname, name+"-") {
			return d
		}
		ours.Store(d.ID, true)
		if n, err := emulator.Read(d); err == nil && n.Role == emulator.Worker {
			d.UserData = bytes.ReplaceAll(d.UserData, []byte(n.Endpoint.String()), []byte(netip.AddrPortFrom(unrouted, n.Endpoint.Port()).String()))
		}
		return d
	}
	suite.amend.Store(&amend)
	t.Cleanup(func() { suite.amend.Store(nil) })
	r := createCluster(ctx, t, g, name, "", withEndpointPort(6473))

	t.Log("the control plane comes up")
	g.Eventually(func(g Gomega) {
		kcp := &controlplanev1.KubeadmControlPlane{}
		g.Expect(r.k8s.Get(ctx, r.kcpKey(), kcp)).To(Succeed())
		g.Expect(ptr.Deref(kcp.Status.Initialization.ControlPlaneInitialized, false)).To(BeTrue())
	}).Should(Succeed())
	t.Log("the emulator refuses the worker: its endpoint is unreachable")
	var worker string
	g.Eventually(func() []emulator.Reason {
		var reasons []emulator.Reason
		for _, err := range suite.runner.Refusals() {
			var refusal *emulator.Refusal
			if !errors.As(err, &refusal) {
				continue
			}
			if _, mine := ours.Load(refusal.DeviceID); mine {
				reasons, worker = append(reasons, refusal.Reason), refusal.DeviceID
			}
		}
		return reasons
	}).Should(ConsistOf(emulator.EndpointUnreachable))
	t.Log("so its Machine has no node, and the Cluster is not Available")
	machines := &clusterv1.MachineList{}
	var machine clusterv1.Machine
	g.Eventually(func(g Gomega) {
		g.Expect(r.k8s.List(ctx, machines, client.InNamespace(r.ns))).To(Succeed())
		g.Expect(machines.Items).To(ContainElement(HaveField("Spec.ProviderID", device.ProviderID(worker)), &machine))
	}).Should(Succeed(), "the worker's Machine has the refused device")
	g.Expect(machine.Status.NodeRef.IsDefined()).To(BeFalse(), "the worker's Machine has a node")
	cluster := &clusterv1.Cluster{}
	g.Expect(r.k8s.Get(ctx, r.key, cluster)).To(Succeed())
	g.Expect(conditions.IsTrue(cluster, clusterv1.AvailableCondition)).To(BeFalse())
	deletion(ctx, t, r)
}

// run is a test's Cluster in a namespace of its own, on the management
// cluster that manages it (the suite's, until it is moved), with the
// emulator making its devices nodes.
type run struct {
	name     string
	metalAPI *metal.Client
	ns       string
	key      client.ObjectKey
	// k8s reaches the management cluster that manages the Cluster;
	// management is that cluster, whose proxy() Cluster API's e2e framework
	// takes (made in the steps that call the framework: see frameworkG).
	k8s        client.Client
	management *management
	// released are the addresses the MachineDeployment's scale-down
	// released, which the rollout's new machine reuses.
	released map[string]bool
}

// kcpKey names the Cluster's KubeadmControlPlane.
func (r *run) kcpKey() client.ObjectKey {
	return client.ObjectKey{Namespace: r.ns, Name: r.name + "-control-plane"}
}

func (r *run) cluster(ctx context.Context, g Gomega) *clusterv1.Cluster {
	c := &clusterv1.Cluster{}
	g.Expect(r.k8s.Get(ctx, r.key, c)).To(Succeed())
	return c
}

// machineDeployment is the flavor's one MachineDeployment.
func (r *run) machineDeployment(ctx context.Context, g Gomega) *clusterv1.MachineDeployment {
	mds := &clusterv1.MachineDeploymentList{}
	g.Expect(r.k8s.List(ctx, mds, client.InNamespace(r.ns))).To(Succeed())
	g.Expect(mds.Items).To(HaveLen(1))
	return &mds.Items[0]
}

func (r *run) controlPlaneMachines(ctx context.Context, g Gomega) []clusterv1.Machine {
	machines := &clusterv1.MachineList{}
	g.Expect(r.k8s.List(ctx, machines, client.InNamespace(r.ns), client.HasLabels{clusterv1.MachineControlPlaneLabel})).To(Succeed())
	return machines.Items
}

// devicesByProviderID are the cluster's devices, as the platform lists
// them, by the provider ID of their Machines.
func (r *run) devicesByProviderID(ctx context.Context, g Gomega) map[string]metalv1.Device {
	devices, err := r.metalAPI.ListDevices(ctx, metal.DeviceFilter{Tag: device.ClusterTagPrefix + r.name})
	g.Expect(err).NotTo(HaveOccurred())
	out := map[string]metalv1.Device{}
	for _, d := range devices {
		out[device.ProviderID(d.GetId())] = d
	}
	return out
}

// addresses are the IPAddresses of the namespace, by the Machine their
// claim is for (the annotation CAPP writes on it).
func (r *run) addresses(ctx context.Context, g Gomega) map[string]string {
	addresses := &ipamv1.IPAddressList{}
	g.Expect(r.k8s.List(ctx, addresses, client.InNamespace(r.ns))).To(Succeed())
	out := map[string]string{}
	for _, a := range addresses.Items {
		claim := &ipamv1.IPAddressClaim{}
		g.Expect(r.k8s.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: a.Spec.ClaimRef.Name}, claim)).To(Succeed())
		machine := claim.Annotations[infrav1.ClaimMachineAnnotation]
		g.Expect(out).NotTo(HaveKey(machine), "one address per Machine")
		out[machine] = a.Spec.Address
	}
	return out
}

// expectAddressesOfMachines waits until the namespace holds n Machines and
// exactly their IPAddresses and IPAddressClaims, one of each per Machine:
// those of removed machines released. It returns the addresses by Machine.
func (r *run) expectAddressesOfMachines(ctx context.Context, g Gomega, n int) map[string]string {
	var addresses map[string]string
	g.Eventually(func(g Gomega) {
		machines := &clusterv1.MachineList{}
		g.Expect(r.k8s.List(ctx, machines, client.InNamespace(r.ns))).To(Succeed())
		g.Expect(machines.Items).To(HaveLen(n))
		claims := &ipamv1.IPAddressClaimList{}
		g.Expect(r.k8s.List(ctx, claims, client.InNamespace(r.ns))).To(Succeed())
		g.Expect(claims.Items).To(HaveLen(n), "one IPAddressClaim per Machine")
		addresses = r.addresses(ctx, g)
		names := make([]string, len(machines.Items))
		for i, m := range machines.Items {
			names[i] = m.Name
		}
		g.Expect(slices.Collect(maps.Keys(addresses))).To(ConsistOf(names), "the IPAddresses are the Machines'")
	}).Should(Succeed())
	return addresses
}

// withFailureDomains lists facilities as the PacketCluster's failure domains.
func withFailureDomains(facilities []string) func(*unstructured.Unstructured) error {
	return func(obj *unstructured.Unstructured) error {
		if obj.GetKind() != "PacketCluster" {
			return nil
		}
		fds := make([]any, len(facilities))
		for i, f := range facilities {
			fds[i] = map[string]any{"facility": f}
		}
		return unstructured.SetNestedSlice(obj.Object, fds, "spec", "failureDomains")
	}
}

// withEndpointPort sets the PacketCluster's endpoint port (its host stays
// the reservation's). The tests' clusters come up side by side, and Cluster
// API's in-memory API servers, which answer for the emulated control
// planes, listen on the endpoint's port on every address: each test's
// cluster but TestDefaultFlavor's (the default, 6443) has a port of its own.
func withEndpointPort(port int64) func(*unstructured.Unstructured) error {
	return func(obj *unstructured.Unstructured) error {
		if obj.GetKind() != "PacketCluster" {
			return nil
		}
		return unstructured.SetNestedField(obj.Object, port, "spec", "controlPlaneEndpoint", "port")
	}
}

func mergeMap(m, with map[string]string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	maps.Copy(m, with)
	return m
}

// createCluster creates the Cluster name of flavor (the default for "") on
// the suite's management cluster, in a namespace of its own, its objects
// changed by edits. Unless the test deleted it, cleanup deletes it and
// waits until its devices are gone.
func createCluster(ctx context.Context, t *testing.T, g *WithT, name, flavor string, edits ...func(*unstructured.Unstructured) error) *run {
	m := suite.source
	r := &run{name: name, metalAPI: suite.metalAPI, k8s: m.k8s, management: m}
	var err error
	r.ns, err = m.env.NewNamespace(ctx, "workload")
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := renderFlavor(m, name, flavor, r.ns, edits)
	g.Expect(err).NotTo(HaveOccurred())
	inputs, err := flavorInputs(r.k8s, r.ns, name, edits)
	g.Expect(err).NotTo(HaveOccurred())
	for _, obj := range append(inputs, objs...) {
		g.Expect(r.k8s.Create(ctx, obj)).To(Succeed(), "creating %s %s", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName())
	}
	r.key = client.ObjectKey{Namespace: r.ns, Name: name}
	t.Cleanup(func() {
		ctx := context.Background()
		if t.Failed() {
			for _, err := range suite.runner.Refusals() {
				t.Logf("the emulator refused: %v", err)
			}
			logMachines(ctx, t, r.k8s, r.ns)
		}
		if err := r.k8s.Delete(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name}}); apierrors.IsNotFound(err) {
			return
		}
		t.Logf("deleting the Cluster %s left behind", r.key)
		g := NewWithT(t)
		g.Eventually(func(g Gomega) { g.Expect(r.devicesByProviderID(ctx, g)).To(BeEmpty()) }).WithTimeout(3*time.Minute).Should(Succeed(), "the Cluster's devices are gone")
	})
	return r
}

// flavorInputs are the objects a user creates beside the flavor
// (testenv.FlavorInputs), changed by edits as the flavor's objects.
func flavorInputs(k8s client.Client, ns, cluster string, edits []func(*unstructured.Unstructured) error) ([]client.Object, error) {
	typed := testenv.FlavorInputs(ns, cluster, "metal-credentials", simtest.APIKey)
	objs := make([]client.Object, len(typed))
	for i, obj := range typed {
		gvk, err := k8s.GroupVersionKindFor(obj)
		if err != nil {
			return nil, err
		}
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{Object: content}
		u.SetGroupVersionKind(gvk)
		for _, edit := range edits {
			if err := edit(u); err != nil {
				return nil, fmt.Errorf("editing %s %s: %w", u.GetKind(), u.GetName(), err)
			}
		}
		objs[i] = u
	}
	return objs, nil
}

// logMachines logs the conditions of the Machines of ns, for a failure.
func logMachines(ctx context.Context, t *testing.T, k8s client.Client, ns string) {
	machines := &clusterv1.MachineList{}
	if err := k8s.List(ctx, machines, client.InNamespace(ns)); err != nil {
		t.Logf("listing the Machines: %v", err)
		return
	}
	for _, m := range machines.Items {
		for _, c := range m.Status.Conditions {
			t.Logf("Machine %s: %s=%s %s: %s", m.Name, c.Type, c.Status, c.Reason, c.Message)
		}
	}
}

// defaultRollout sets the rollout strategy of a MachineDeployment as Cluster
// API's defaulting webhook does, which the test does not install.
func defaultRollout(md *unstructured.Unstructured) error {
	if _, set, _ := unstructured.NestedMap(md.Object, "spec", "rollout", "strategy"); set {
		return nil
	}
	return unstructured.SetNestedMap(md.Object, map[string]any{
		"type":          string(clusterv1.RollingUpdateMachineDeploymentStrategyType),
		"rollingUpdate": map[string]any{"maxSurge": int64(1), "maxUnavailable": int64(0)},
	}, "spec", "rollout", "strategy")
}

// workloadClient reaches the workload cluster with the kubeconfig Cluster
// API wrote for it: through its endpoint, with the cluster's CA.
func workloadClient(ctx context.Context, g Gomega, k8s client.Client, cluster client.ObjectKey) client.Client {
	c, err := client.New(workloadConfig(ctx, g, k8s, cluster), client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	return c
}

// workloadConfig is the client configuration of the kubeconfig Cluster API
// wrote for the workload cluster.
func workloadConfig(ctx context.Context, g Gomega, k8s client.Client, cluster client.ObjectKey) *rest.Config {
	kubeconfig := &corev1.Secret{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: secret.Name(cluster.Name, secret.Kubeconfig)}, kubeconfig)).To(Succeed())
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig.Data[secret.KubeconfigDataName])
	g.Expect(err).NotTo(HaveOccurred())
	return cfg
}
