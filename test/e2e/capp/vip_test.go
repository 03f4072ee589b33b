package capp

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	inclusterv1 "sigs.k8s.io/cluster-api-ipam-provider-in-cluster/api/v1alpha2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/nodetools"
)

// vipSpec claims the VIP from the InClusterIPPool "vip" on VLAN 1000, the
// one the machines' bond0 carries from vrf-v4.
func vipSpec(pc *infrav1.PacketCluster) {
	pc.Spec.VIPManager = infrav1.VIPManagerKubeVIP
	pc.Spec.VIP = &infrav1.ControlPlaneVIP{AddressFromPool: *poolRef("InClusterIPPool", "vip"), VXLAN: 1000}
}

func vipPoolUsed(ns string) int {
	GinkgoHelper()
	pool := &inclusterv1.InClusterIPPool{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vip"}, pool)).To(Succeed())
	if pool.Status.Addresses == nil {
		return 0
	}
	return pool.Status.Addresses.Used
}

// userDataFiles are the files the machine's rendered user-data writes.
func userDataFiles(pm *infrav1.PacketMachine) map[string]string {
	GinkgoHelper()
	secret := &corev1.Secret{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: pm.Namespace, Name: controllers.UserDataSecretName(pm.Name)}, secret)).To(Succeed())
	userData := secret.Data[controllers.UserDataKey]
	nodetools.CloudInitSchema(GinkgoT(), userData)
	var cfg struct {
		WriteFiles []struct{ Path, Content string } `json:"write_files"`
	}
	Expect(yaml.Unmarshal(userData, &cfg)).To(Succeed())
	files := map[string]string{}
	for _, f := range cfg.WriteFiles {
		files[f.Path] = f.Content
	}
	return files
}

// controlPlane labels the Machine as KubeadmControlPlane's are.
func controlPlane(machine *clusterv1.Machine) {
	GinkgoHelper()
	base := machine.DeepCopy()
	machine.Labels[clusterv1.MachineControlPlaneLabel] = ""
	Expect(k8s.Patch(ctx, machine, client.MergeFrom(base))).To(Succeed())
}

var _ = Describe("A PacketCluster with a control-plane VIP from an IPAM pool", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("is accepted only with KUBE_VIP, without a host, and keeps its VIP", func() {
		for msg, edit := range map[string]func(*infrav1.PacketCluster){
			"vip needs vipManager KUBE_VIP": func(pc *infrav1.PacketCluster) {
				vipSpec(pc)
				pc.Spec.VIPManager = infrav1.VIPManagerCPEM
			},
			"controlPlaneEndpoint.host must be empty with vip": func(pc *infrav1.PacketCluster) {
				vipSpec(pc)
				pc.Spec.ControlPlaneEndpoint.Host = userEndpoint
			},
			"apiGroup is required": func(pc *infrav1.PacketCluster) {
				vipSpec(pc)
				pc.Spec.VIP.AddressFromPool.APIGroup = nil
			},
		} {
			pc := &infrav1.PacketCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "invalid"}, Spec: infrav1.PacketClusterSpec{ProjectID: "p"}}
			edit(pc)
			Expect(k8s.Create(ctx, pc)).To(MatchError(ContainSubstring(msg)))
		}
		pc := &infrav1.PacketCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "valid"}, Spec: infrav1.PacketClusterSpec{ProjectID: "p"}}
		vipSpec(pc)
		Expect(k8s.Create(ctx, pc)).To(Succeed())
		base := pc.DeepCopy()
		pc.Spec.VIP.VXLAN = 1001
		Expect(k8s.Patch(ctx, pc, client.MergeFrom(base))).To(MatchError(ContainSubstring("vip is immutable")))
		Expect(k8s.Delete(ctx, pc)).To(Succeed())
	})

	It("claims its endpoint, gives it to the control-plane machines' kube-vip only, and releases it on deletion", func() {
		createPools(ns)
		Expect(k8s.Create(ctx, &inclusterv1.InClusterIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vip"},
			Spec:       inclusterv1.InClusterIPPoolSpec{Addresses: []string{"10.60.0.200-10.60.0.201"}, Prefix: 24, Gateway: "10.60.0.1"},
		})).To(Succeed())
		pc := packetCluster(ns, vipSpec)

		By("claiming the VIP, owned and protected by the PacketCluster, and making it the endpoint")
		claim := &ipamv1.IPAddressClaim{}
		Eventually(func() error {
			return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: controllers.VIPClaimName("cluster")}, claim)
		}).Should(Succeed())
		Expect(claim.Name).To(Equal("cluster-control-plane-vip"))
		Expect(metav1.IsControlledBy(claim, pc)).To(BeTrue())
		Expect(claim.Finalizers).To(ContainElement(infrav1.VIPClaimProtectionFinalizer))
		Expect(claim.Spec.ClusterName).To(Equal("cluster"))
		Expect(claim.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, "cluster"))
		Eventually(clusterCondition(pc, infrav1.ControlPlaneEndpointReadyCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.VIPClaimedReason, "10.60.0.200:6443 is the VIP bound to IPAddressClaim cluster-control-plane-vip"))
		Eventually(clusterCondition(pc, infrav1.ReadyCondition)).Should(HaveField("Status", metav1.ConditionTrue))
		Eventually(provisioned(pc)).Should(HaveValue(BeTrue()))
		pc = getCluster(pc)
		Expect(pc.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: "10.60.0.200", Port: 6443}))
		Expect(pc.Status.VIP).To(Equal("10.60.0.200"))
		Eventually(vipPoolUsed).WithArguments(ns).Should(Equal(1), "the pool counts the VIP")
		Expect(reservationsOf(pc)).To(BeEmpty())

		bond0 := twoPortsThreeNetworks()[:1]
		cp, cpm := machineFixture(ns, "cp", bond0)
		controlPlane(cp)
		worker, wpm := machineFixture(ns, "worker", bond0)
		stray, spm := machineFixture(ns, "stray", twoPortsThreeNetworks()[1:])
		controlPlane(stray)
		for _, m := range []*clusterv1.Machine{cp, worker, stray} {
			setBootstrapData(m, bootstrapData)
		}

		By("running kube-vip on the control-plane machine's bond0.1000 for the VIP")
		Eventually(condition(cpm, infrav1.BootstrapDataRenderedCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.BootstrapDataRenderedReason, ""))
		Expect(userDataFiles(cpm)).NotTo(HaveKey(cloudinit.EndpointBindingPath), "kube-vip announces the VIP; nothing binds it to lo")
		manifest := userDataFiles(cpm)[cloudinit.KubeVIPManifestPath]
		Expect(manifest).NotTo(BeEmpty())
		pod := &corev1.Pod{}
		Expect(yaml.UnmarshalStrict([]byte(manifest), pod)).To(Succeed())
		env := map[string]string{}
		for _, e := range pod.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		Expect(env).To(HaveKeyWithValue("vip_address", "10.60.0.200"))
		Expect(env).To(HaveKeyWithValue("vip_interface", "bond0.1000"))
		Expect(env).To(HaveKeyWithValue("vip_arp", "true"))
		Expect(env).To(HaveKeyWithValue("vip_leaderelection", "true"))
		Expect(env).To(HaveKeyWithValue("port", "6443"))
		Expect(pod.Spec.Containers[0].Image).To(Equal(cloudinit.DefaultKubeVIPImage))

		Expect(pod.Spec.Volumes[0].HostPath.Path).To(Equal("/etc/kubernetes/admin.conf"), "a joining node's kube-vip")

		By("giving the node that runs kubeadm init of Kubernetes 1.34 super-admin.conf until kubeadm init is done")
		first, fpm := machineFixture(ns, "first", bond0)
		controlPlane(first)
		base := first.DeepCopy()
		first.Spec.Version = "v1.34.1"
		Expect(k8s.Patch(ctx, first, client.MergeFrom(base))).To(Succeed())
		setBootstrapData(first, strings.ReplaceAll(bootstrapData, "kubeadm join", "kubeadm init"))
		Eventually(condition(fpm, infrav1.BootstrapDataRenderedCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.BootstrapDataRenderedReason, ""))
		initPod := &corev1.Pod{}
		Expect(yaml.UnmarshalStrict([]byte(userDataFiles(fpm)[cloudinit.KubeVIPManifestPath]), initPod)).To(Succeed())
		Expect(initPod.Spec.Volumes[0].HostPath.Path).To(Equal("/etc/kubernetes/super-admin.conf"))
		secret := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: controllers.UserDataSecretName(fpm.Name)}, secret)).To(Succeed())
		var cfg struct {
			RunCmd []any `json:"runcmd"`
		}
		Expect(yaml.Unmarshal(secret.Data[controllers.UserDataKey], &cfg)).To(Succeed())
		Expect(cfg.RunCmd).NotTo(BeEmpty())
		Expect(cfg.RunCmd[len(cfg.RunCmd)-1]).To(BeEquivalentTo(toAny(cloudinit.KubeVIPRestoreCommand)), "the last command returns kube-vip to admin.conf")

		By("giving a worker none")
		Eventually(condition(wpm, infrav1.BootstrapDataRenderedCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.BootstrapDataRenderedReason, ""))
		Expect(userDataFiles(wpm)).NotTo(HaveKey(cloudinit.KubeVIPManifestPath))

		By("saying a control-plane machine without the VIP's VLAN cannot announce it")
		Eventually(condition(spm, infrav1.BootstrapDataRenderedCondition)).Should(haveCondition(metav1.ConditionFalse,
			infrav1.VIPNetworkMissingReason, "no network with vxlan 1000 (PacketCluster cluster spec.vip.vxlan)"))

		By("releasing the VIP when the PacketCluster goes")
		for _, pm := range []*infrav1.PacketMachine{cpm, wpm, spm, fpm} {
			Expect(k8s.Delete(ctx, pm)).To(Succeed())
		}
		Expect(k8s.Delete(ctx, pc)).To(Succeed())
		Eventually(gone(pc)).Should(BeTrue())
		Expect(gone(claim)()).To(BeTrue(), "the PacketCluster outlived its VIP's claim")
		Eventually(vipPoolUsed).WithArguments(ns).Should(Equal(0))
	})
})

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
