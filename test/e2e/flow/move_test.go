package flow

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// controlPlane is the cluster's one stand-alone control-plane Machine.
const controlPlane = clusterName + "-control-plane"

// TestClusterctlMoveKeepsDevicesAndAddresses provisions a cluster on one
// management cluster, moves it with `clusterctl move` to another driving the
// same Equinix Metal project, and checks that the target adopts the devices
// (creates and deletes none) and keeps every address, then scales the
// workers down from the target.
func TestClusterctlMoveKeepsDevicesAndAddresses(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	ctx := context.Background()
	clusterctl, kustomize := tool(t, "CLUSTERCTL", "clusterctl"), tool(t, "KUSTOMIZE", "kustomize")
	metalAPI := startPlatform(t, g)
	logs := managerLogs(t, g)
	home := t.TempDir()
	ctlEnv := []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "CLUSTERCTL_DISABLE_VERSIONCHECK=true"}

	// move refuses a Cluster whose control plane has no Node, and every
	// Machine without one: the workload cluster is a third API server,
	// where the test registers each machine's Node as its kubelet would.
	workload, err := testenv.Start(testenv.Options{Empty: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = workload.Stop() })
	workloadKubeconfig := filepath.Join(home, "workload.kubeconfig")
	g.Expect(workload.WriteKubeconfig(workloadKubeconfig)).To(Succeed())

	// move reads clusterctl's inventory on both sides (the target must have
	// every provider of the source) and moves only the kinds of the CRDs
	// clusterctl installed (labelled clusterctl.cluster.x-k8s.io), so both
	// management clusters are made the way a user makes them, with
	// `clusterctl init`, here from a local repository, rather than by
	// imitating what init writes.
	var config string
	management := func(name string) (*testenv.Environment, string) {
		env, err := testenv.Start(testenv.Options{Empty: true})
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() { _ = env.Stop() })
		if config == "" {
			config, err = testenv.WriteClusterctlRepository(env.Root, filepath.Join(home, "repository"), kustomize, false)
			g.Expect(err).NotTo(HaveOccurred())
		}
		g.Expect(testenv.InstallCertManagerCRDs(env.Config)).To(Succeed())
		kubeconfig := filepath.Join(home, name+".kubeconfig")
		g.Expect(env.WriteKubeconfig(kubeconfig)).To(Succeed())
		out, err := runClusterctl(ctlEnv, clusterctl, "init", "--kubeconfig", kubeconfig, "--config", config,
			"--core", "cluster-api", "--bootstrap", "-", "--control-plane", "-",
			"--infrastructure", "packet", "--ipam", "metal-vrf")
		g.Expect(err).NotTo(HaveOccurred(), "clusterctl init on the %s:\n%s", name, out)
		// The IPAM provider's webhooks, which record the addresses move
		// creates, answer from its manager in this process; the others are
		// deleted (nothing serves them: no Pod runs in envtest).
		g.Expect(env.ServeIPAMWebhooks(ctx)).To(Succeed())
		// The managers run beside the API server, not in the Deployments
		// init created.
		startManagers(ctx, t, g, env, metalAPI, logs)
		return env, kubeconfig
	}
	source, sourceKubeconfig := management("source")
	// The target's managers run during the move, as on a real target: the
	// move creates the Cluster paused, and they must leave what arrives
	// alone until it is resumed.
	target, targetKubeconfig := management("target")

	src := source.Client
	ns, err := source.NewNamespace(ctx, "move")
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfigData, err := os.ReadFile(workloadKubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	for _, obj := range append(clusterObjects(ns, clusterName), controlPlaneObjects(ns, kubeconfigData)...) {
		g.Expect(src.Create(ctx, obj)).To(Succeed(), "creating %T %s", obj, obj.GetName())
	}
	// A bootstrap provider's data Secret is owned by its config, which moves
	// with its Machine; this one, written by hand, moves with its Cluster.
	cluster := &clusterv1.Cluster{}
	g.Expect(src.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, cluster)).To(Succeed())
	bootstrap := &corev1.Secret{}
	g.Expect(src.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bootstrap"}, bootstrap)).To(Succeed())
	bootstrap.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: clusterName, UID: cluster.UID}}
	g.Expect(src.Update(ctx, bootstrap)).To(Succeed())
	scaleWorkers(ctx, g, src, ns, 2)

	// provisioned waits until all three machines are provisioned on k8s
	// with a Node (registering the Nodes), and the control plane
	// initialized.
	provisioned := func(k8s client.Client) {
		g.Eventually(func(g Gomega) {
			machines := &clusterv1.MachineList{}
			g.Expect(k8s.List(ctx, machines, client.InNamespace(ns))).To(Succeed())
			g.Expect(machines.Items).To(HaveLen(3))
			for _, m := range machines.Items {
				g.Expect(ptr.Deref(m.Status.Initialization.InfrastructureProvisioned, false)).To(BeTrue(), "Machine %s provisioned", m.Name)
				g.Expect(m.Spec.ProviderID).NotTo(BeEmpty())
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: m.Name}, Spec: corev1.NodeSpec{ProviderID: m.Spec.ProviderID}}
				if err := workload.Client.Create(ctx, node); !apierrors.IsAlreadyExists(err) {
					g.Expect(err).NotTo(HaveOccurred())
				}
				g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue(), "Machine %s has its Node", m.Name)
			}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, cluster)).To(Succeed())
			g.Expect(conditions.IsTrue(cluster, clusterv1.ClusterControlPlaneInitializedCondition)).To(BeTrue())
		}).Should(Succeed())
	}
	provisioned(src)
	machinesBefore := providerIDs(ctx, g, src, ns)
	addressesBefore := claimedAddresses(ctx, g, src, ns)
	g.Expect(machinesBefore).To(HaveLen(6), "three Machines and three PacketMachines")
	g.Expect(addressesBefore).To(HaveLen(3))
	g.Expect(metalAPI.devices(ctx, g, clusterName)).To(HaveLen(3))
	created, deleted := metalAPI.sim.Calls(sim.OpCreateDevice), metalAPI.sim.Calls(sim.OpDeleteDevice)

	start := time.Now()
	out, err := runClusterctl(ctlEnv, clusterctl, "move", "--kubeconfig", sourceKubeconfig, "--to-kubeconfig", targetKubeconfig,
		"--namespace", ns, "--config", config)
	g.Expect(err).NotTo(HaveOccurred(), "clusterctl move:\n%s", out)
	t.Logf("clusterctl move took %s", time.Since(start).Round(time.Second))

	dst := target.Client
	g.Expect(providerIDs(ctx, g, dst, ns)).To(Equal(machinesBefore), "the Machines and PacketMachines arrived with their providerIDs")
	md := &clusterv1.MachineDeployment{}
	g.Expect(dst.Get(ctx, client.ObjectKey{Namespace: ns, Name: deployment}, md)).To(Succeed())
	// Status does not move: provisioned again is the target's own reading.
	provisioned(dst)
	g.Expect(claimedAddresses(ctx, g, dst, ns)).To(Equal(addressesBefore), "every claim bound to its address of before")
	// The pool counts the moved addresses once their claims are bound again,
	// with no IPAddress coming or going to trigger it.
	g.Eventually(poolUsed(ctx, dst, ns)).Should(BeEquivalentTo(3))
	g.Expect(metalAPI.sim.Calls(sim.OpCreateDevice)).To(Equal(created), "the target created no device")
	g.Expect(metalAPI.sim.Calls(sim.OpDeleteDevice)).To(Equal(deleted), "the target deleted no device")

	for _, list := range []client.ObjectList{&clusterv1.ClusterList{}, &clusterv1.MachineDeploymentList{}, &clusterv1.MachineList{},
		&infrav1.PacketClusterList{}, &infrav1.PacketMachineList{}, &v1alpha1.MetalVRFIPPoolList{},
		&ipamv1.IPAddressClaimList{}, &ipamv1.IPAddressList{}} {
		g.Expect(src.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list).To(HaveField("Items", BeEmpty()), "%T left on the source", list)
	}

	t.Log("scaling the workers to 0 on the target takes their devices and addresses back")
	scaleWorkers(ctx, g, dst, ns, 0)
	g.Eventually(func() []string { return metalAPI.devices(ctx, g, clusterName) }).Should(ConsistOf(machinesBefore["Machine/"+controlPlane]))
	g.Eventually(func(g Gomega) {
		g.Expect(claimedAddresses(ctx, g, dst, ns)).To(HaveKey(HavePrefix(controlPlane)), "the control plane's claim stays")
		g.Expect(claimedAddresses(ctx, g, dst, ns)).To(HaveLen(1), "the workers' claims are released")
	}).Should(Succeed())
	// The control plane's moved address is still counted.
	g.Eventually(poolUsed(ctx, dst, ns)).Should(BeEquivalentTo(1))
}

// controlPlaneObjects are the cluster's stand-alone control-plane Machine,
// on a PacketMachine like the workers', and the kubeconfig Secret through
// which Cluster API reaches the workload cluster's API server.
func controlPlaneObjects(ns string, kubeconfig []byte) []client.Object {
	return append([]client.Object{
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterName + "-kubeconfig", Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
			Type:       clusterv1.ClusterSecretType,
			Data:       map[string][]byte{"value": kubeconfig},
		},
	}, controlPlaneMachine(ns, clusterName, controlPlane, "")...)
}

// controlPlaneMachine is a stand-alone control-plane Machine name of the
// Cluster cluster (of clusterObjects), in failureDomain when not empty, and
// its PacketMachine, like the workers'.
func controlPlaneMachine(ns, cluster, name, failureDomain string) []client.Object {
	var template *infrav1.PacketMachineTemplate
	for _, obj := range clusterObjects(ns, cluster) {
		if t, ok := obj.(*infrav1.PacketMachineTemplate); ok {
			template = t
		}
	}
	return []client.Object{
		&infrav1.PacketMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       template.Spec.Template.Spec,
		},
		&clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
				clusterv1.ClusterNameLabel: cluster, clusterv1.MachineControlPlaneLabel: "",
			}},
			Spec: clusterv1.MachineSpec{
				ClusterName:   cluster,
				Version:       "v1.36.3",
				FailureDomain: failureDomain,
				Bootstrap:     clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "PacketMachine", Name: name,
				},
			},
		},
	}
}

// providerIDs maps "Machine/<name>" and "PacketMachine/<name>" to the
// object's spec.providerID.
func providerIDs(ctx context.Context, g Gomega, k8s client.Client, ns string) map[string]string {
	ids := map[string]string{}
	machines := &clusterv1.MachineList{}
	g.Expect(k8s.List(ctx, machines, client.InNamespace(ns))).To(Succeed())
	for _, m := range machines.Items {
		ids["Machine/"+m.Name] = m.Spec.ProviderID
	}
	pms := &infrav1.PacketMachineList{}
	g.Expect(k8s.List(ctx, pms, client.InNamespace(ns))).To(Succeed())
	for _, pm := range pms.Items {
		ids["PacketMachine/"+pm.Name] = pm.Spec.ProviderID
	}
	return ids
}

// claimedAddresses maps each bound claim's name to its IPAddress's address.
func claimedAddresses(ctx context.Context, g Gomega, k8s client.Client, ns string) map[string]string {
	addresses, err := testenv.ClaimedAddresses(ctx, k8s, ns)
	g.Expect(err).NotTo(HaveOccurred())
	return addresses
}

// runClusterctl runs clusterctl with env as its environment (beside PATH),
// returning its combined output.
func runClusterctl(env []string, clusterctl string, args ...string) ([]byte, error) {
	cmd := exec.Command(clusterctl, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	return cmd.CombinedOutput()
}
