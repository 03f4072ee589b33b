package capp

import (
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// userDataCommands are the runcmd entries of the machine's rendered
// user-data.
func userDataCommands(pm *infrav1.PacketMachine) []any {
	GinkgoHelper()
	secret := &corev1.Secret{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: pm.Namespace, Name: controllers.UserDataSecretName(pm.Name)}, secret)).To(Succeed())
	var cfg struct {
		RunCmd []any `json:"runcmd"`
	}
	Expect(yaml.Unmarshal(secret.Data[controllers.UserDataKey], &cfg)).To(Succeed())
	return cfg.RunCmd
}

// withVersion sets the Machine's Kubernetes version, as its control plane
// or MachineDeployment does.
func withVersion(machine *clusterv1.Machine, version string) {
	GinkgoHelper()
	base := machine.DeepCopy()
	machine.Spec.Version = version
	Expect(k8s.Patch(ctx, machine, client.MergeFrom(base))).To(Succeed())
}

// withNodeSoftware sets the PacketMachine's spec.nodeSoftware.
func withNodeSoftware(pm *infrav1.PacketMachine, n infrav1.NodeSoftware) {
	GinkgoHelper()
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pm), pm)).To(Succeed())
	base := pm.DeepCopy()
	pm.Spec.NodeSoftware = n
	Expect(k8s.Patch(ctx, pm, client.MergeFrom(base))).To(Succeed())
}

func rendered(pm *infrav1.PacketMachine) {
	GinkgoHelper()
	Eventually(condition(pm, infrav1.BootstrapDataRenderedCondition)).Should(
		haveCondition(metav1.ConditionTrue, infrav1.BootstrapDataRenderedReason, ""))
}

var _ = Describe("The user-data of a machine", func() {
	kubeadmJoin := "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml"
	kubeadmInit := "kubeadm init --config /run/kubeadm/kubeadm.yaml"
	initData := "## template: jinja\n#cloud-config\nruncmd:\n- " + kubeadmInit + "\n"
	ports := []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{{VXLAN: simtest.NodesVXLAN, Address: "10.60.5.5/24"}}}}

	It("of a CPEM cluster waits for the reserved endpoint, binds it on the control-plane machines only, and installs the node software where asked", func() {
		ns := newNamespace()
		// Refused twice, the reservation takes 15 s (the backoff): long
		// enough to see the control-plane machine wait for it.
		metalSim.FailNext(sim.OpRequestIPReservation, 2, http.StatusUnprocessableEntity, 0)
		DeferCleanup(metalSim.ClearFaults)
		pc := packetCluster(ns, nil)
		cp, cpm := machineFixture(ns, "cp", ports)
		controlPlane(cp)
		withVersion(cp, "v1.33.1")
		withNodeSoftware(cpm, infrav1.NodeSoftwareInstall)
		setBootstrapData(cp, initData)

		By("waiting for the reservation, without a device")
		Eventually(condition(cpm, infrav1.BootstrapDataRenderedCondition)).Should(haveCondition(metav1.ConditionFalse,
			infrav1.WaitingForControlPlaneEndpointReason, "waiting for PacketCluster cluster to reserve its control-plane endpoint"))
		Expect(get(cpm).Spec.ProviderID).To(BeEmpty())

		By("binding the reserved address to lo, then installing the software, before kubeadm init")
		Eventually(clusterCondition(pc, infrav1.ControlPlaneEndpointReadyCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.ControlPlaneEndpointReservedReason, ""))
		res := reservationsOf(getCluster(pc))
		Expect(res).To(HaveLen(1))
		endpoint := res[0].GetAddress()
		rendered(cpm)
		files := userDataFiles(cpm)
		Expect(files).To(HaveKeyWithValue(cloudinit.EndpointBindingPath, ContainSubstring("\nauto lo:0\niface lo:0 inet static\n    address "+endpoint+"/32\n")))
		Expect(files).To(HaveKeyWithValue(cloudinit.NodeSoftwarePath, ContainSubstring("\nkubernetes_version=1.33.1\n")))
		Expect(userDataCommands(cpm)).To(Equal([]any{
			toAny(cloudinit.RunCommand),
			[]any{"ip", "addr", "replace", endpoint + "/32", "dev", "lo"},
			[]any{cloudinit.NodeSoftwarePath},
			kubeadmInit,
		}))

		By("binding it after kubeadm join on a control-plane machine that joins, with preinstalled software, without the install")
		pre, prepm := machineFixture(ns, "cp-preinstalled", ports)
		controlPlane(pre)
		withNodeSoftware(prepm, infrav1.NodeSoftwarePreinstalled)
		setBootstrapData(pre, bootstrapData)
		rendered(prepm)
		Expect(userDataFiles(prepm)).To(And(HaveKey(cloudinit.EndpointBindingPath), Not(HaveKey(cloudinit.NodeSoftwarePath))))
		Expect(userDataCommands(prepm)).To(Equal([]any{
			toAny(cloudinit.RunCommand),
			kubeadmJoin,
			[]any{"ip", "addr", "replace", endpoint + "/32", "dev", "lo"},
		}))

		By("not binding it on a worker, which installs the software")
		worker, wpm := machineFixture(ns, "worker", ports)
		withVersion(worker, "v1.33.1")
		withNodeSoftware(wpm, infrav1.NodeSoftwareInstall)
		setBootstrapData(worker, bootstrapData)
		rendered(wpm)
		Expect(userDataFiles(wpm)).To(And(Not(HaveKey(cloudinit.EndpointBindingPath)), HaveKey(cloudinit.NodeSoftwarePath)))
		Expect(userDataCommands(wpm)).To(Equal([]any{toAny(cloudinit.RunCommand), []any{cloudinit.NodeSoftwarePath}, kubeadmJoin}))

		By("saying the install needs the Machine's version")
		unversioned, upm := machineFixture(ns, "unversioned", ports)
		withNodeSoftware(upm, infrav1.NodeSoftwareInstall)
		setBootstrapData(unversioned, bootstrapData)
		Eventually(condition(upm, infrav1.BootstrapDataRenderedCondition)).Should(haveCondition(metav1.ConditionFalse,
			infrav1.BootstrapDataInvalidReason, `spec.nodeSoftware Install: Machine unversioned spec.version: Kubernetes version "" is not a released version`))

		for _, pm := range []*infrav1.PacketMachine{cpm, prepm, wpm, upm} {
			Expect(k8s.Delete(ctx, pm)).To(Succeed())
		}
		for _, pm := range []*infrav1.PacketMachine{cpm, prepm, wpm, upm} {
			Eventually(gone(pm)).Should(BeTrue())
		}
		Expect(k8s.Delete(ctx, getCluster(pc))).To(Succeed())
		Eventually(gone(pc)).Should(BeTrue())
	})

	It("of a cluster whose endpoint the user set leaves the endpoint alone, and adds no software by default", func() {
		ns := newNamespace()
		cp, cpm := machineFixture(ns, "cp", ports)
		controlPlane(cp)
		setBootstrapData(cp, bootstrapData)
		rendered(cpm)
		Expect(userDataFiles(cpm)).NotTo(Or(HaveKey(cloudinit.EndpointBindingPath), HaveKey(cloudinit.NodeSoftwarePath)))
		Expect(userDataCommands(cpm)).To(Equal([]any{toAny(cloudinit.RunCommand), kubeadmJoin}))
		Expect(k8s.Delete(ctx, cpm)).To(Succeed())
		Eventually(gone(cpm)).Should(BeTrue())
	})
})
