package capp

import (
	"net/http"
	"net/netip"
	"path"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// userEndpoint is the control-plane endpoint the tests' clusters set
// themselves (a documentation address the simulator never hands out).
const userEndpoint = "192.0.2.10"

// packetCluster creates the namespace's Cluster and a PacketCluster without
// an endpoint, edited by edit when not nil, and returns the PacketCluster.
func packetCluster(ns string, edit func(*infrav1.PacketCluster)) *infrav1.PacketCluster {
	GinkgoHelper()
	clusterFixture(ns, func(pc *infrav1.PacketCluster) {
		pc.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{}
		if edit != nil {
			edit(pc)
		}
	})
	return getCluster(&infrav1.PacketCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster"}})
}

func getCluster(pc *infrav1.PacketCluster) *infrav1.PacketCluster {
	GinkgoHelper()
	current := &infrav1.PacketCluster{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pc), current)).To(Succeed())
	return current
}

func clusterCondition(pc *infrav1.PacketCluster, t string) func() *metav1.Condition {
	return func() *metav1.Condition {
		current := &infrav1.PacketCluster{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pc), current); err != nil {
			return nil
		}
		return conditions.Get(current, t)
	}
}

func provisioned(pc *infrav1.PacketCluster) func() *bool {
	return func() *bool { return getCluster(pc).Status.Initialization.Provisioned }
}

// reservationsOf are the simulator's public IPv4 reservations carrying the
// PacketCluster's tag.
func reservationsOf(pc *infrav1.PacketCluster) []metalv1.IPReservation {
	GinkgoHelper()
	res, err := metalAPI.ListPublicIPv4Reservations(ctx, controllers.EndpointTagPrefix+string(pc.UID))
	Expect(err).NotTo(HaveOccurred())
	return res
}

var _ = Describe("A PacketCluster", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("in CPEM mode reserves its endpoint, is provisioned with its failure domain, keeps one reservation across a restart, and releases it before it goes", func() {
		pc := packetCluster(ns, nil)

		By("reserving a public IPv4 address in the metro and making it the endpoint")
		Eventually(clusterCondition(pc, infrav1.ControlPlaneEndpointReadyCondition)).Should(haveCondition(metav1.ConditionTrue, infrav1.ControlPlaneEndpointReservedReason, ""))
		Eventually(clusterCondition(pc, infrav1.ReadyCondition)).Should(HaveField("Status", metav1.ConditionTrue))
		// Conditions are patched apart from the rest of the status.
		Eventually(provisioned(pc)).Should(HaveValue(BeTrue()))
		pc = getCluster(pc)
		Expect(pc.Finalizers).To(ContainElement(infrav1.ClusterFinalizer))
		res := reservationsOf(pc)
		Expect(res).To(HaveLen(1))
		Expect(res[0].GetType()).To(Equal(metalv1.IPRESERVATIONTYPE_PUBLIC_IPV4))
		Expect(res[0].Metro.GetCode()).To(Equal(simtest.Metro))
		Expect(res[0].GetCidr()).To(BeEquivalentTo(32))
		Expect(netip.MustParsePrefix("198.51.100.0/24").Contains(netip.MustParseAddr(res[0].GetAddress()))).To(BeTrue())
		Expect(pc.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: res[0].GetAddress(), Port: 6443}))
		Expect(pc.Annotations).To(HaveKeyWithValue(infrav1.EndpointReservationAnnotation, res[0].GetId()))
		Expect(conditions.Get(pc, infrav1.ControlPlaneEndpointReadyCondition).Message).To(ContainSubstring(res[0].GetId()))

		By("reporting provisioned and one failure domain, the metro, for the control plane")
		Expect(pc.Status.Initialization.Provisioned).To(HaveValue(BeTrue()))
		Expect(pc.Status.FailureDomains).To(HaveExactElements(HaveField("Name", simtest.Metro)))
		Expect(pc.Status.FailureDomains[0].ControlPlane).To(HaveValue(BeTrue()))
		Expect(pc.Status.FailureDomains[0].Attributes).To(HaveKeyWithValue("metro", simtest.Metro))

		By("adopting the tagged reservation when a stopped manager's writes were lost, instead of reserving another")
		stopCAPP()
		reserves := metalSim.Calls(sim.OpRequestIPReservation)
		lost := getCluster(pc)
		base := lost.DeepCopy()
		lost.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{}
		lost.Annotations[infrav1.EndpointReservationAnnotation] = infrav1.EndpointReservationPending
		Expect(k8s.Patch(ctx, lost, client.MergeFrom(base))).To(Succeed())
		base = lost.DeepCopy()
		lost.Status = infrav1.PacketClusterStatus{}
		Expect(k8s.Status().Patch(ctx, lost, client.MergeFrom(base))).To(Succeed())
		var err error
		stopCAPP, err = env.StartCAPP(ctx, cappOptions())
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() string { return getCluster(pc).Spec.ControlPlaneEndpoint.Host }).Should(Equal(res[0].GetAddress()))
		Eventually(clusterCondition(pc, infrav1.ControlPlaneEndpointReadyCondition)).Should(haveCondition(metav1.ConditionTrue, infrav1.ControlPlaneEndpointReservedReason, res[0].GetId()))
		Expect(getCluster(pc).Annotations).To(HaveKeyWithValue(infrav1.EndpointReservationAnnotation, res[0].GetId()))
		Expect(reservationsOf(pc)).To(HaveLen(1))
		Expect(metalSim.Calls(sim.OpRequestIPReservation)).To(Equal(reserves), "a second address was reserved")

		By("releasing the reservation, and only then letting the PacketCluster go")
		metalSim.FailNext(sim.OpDeleteIPAddress, 1000, 503, 0)
		Expect(k8s.Delete(ctx, pc)).To(Succeed())
		Eventually(clusterCondition(pc, infrav1.DeletingCondition)).Should(haveCondition(metav1.ConditionTrue, infrav1.ReleasingEndpointReason, "retrying"))
		Consistently(func() []string { return getCluster(pc).Finalizers }, "2s").Should(ContainElement(infrav1.ClusterFinalizer))
		Expect(reservationsOf(pc)).To(HaveLen(1))
		metalSim.ClearFaults()
		Eventually(gone(pc)).Should(BeTrue())
		_, err = metalAPI.GetIPReservation(ctx, res[0].GetId())
		Expect(err).To(MatchError(ContainSubstring("404")))
		Expect(reservationsOf(pc)).To(BeEmpty())
	})

	It("keeps an endpoint the user set, defaulting its port, and reserves nothing", func() {
		reserves := metalSim.Calls(sim.OpRequestIPReservation)
		pc := packetCluster(ns, func(pc *infrav1.PacketCluster) {
			pc.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: userEndpoint}
		})
		Eventually(clusterCondition(pc, infrav1.ControlPlaneEndpointReadyCondition)).Should(haveCondition(metav1.ConditionTrue, infrav1.ControlPlaneEndpointSetByUserReason, ""))
		Eventually(clusterCondition(pc, infrav1.ReadyCondition)).Should(HaveField("Status", metav1.ConditionTrue))
		Eventually(provisioned(pc)).Should(HaveValue(BeTrue()))
		pc = getCluster(pc)
		Expect(pc.Spec.ControlPlaneEndpoint).To(Equal(clusterv1.APIEndpoint{Host: userEndpoint, Port: 6443}))
		Expect(pc.Annotations).NotTo(HaveKey(infrav1.EndpointReservationAnnotation))
		Expect(reservationsOf(pc)).To(BeEmpty())
		Expect(metalSim.Calls(sim.OpRequestIPReservation)).To(Equal(reserves))

		Expect(k8s.Delete(ctx, pc)).To(Succeed())
		Eventually(gone(pc)).Should(BeTrue())
	})

	It("in KUBE_VIP mode without a host or a VIP says the user must set spec.vip or spec.controlPlaneEndpoint, and is not provisioned", func() {
		pc := packetCluster(ns, func(pc *infrav1.PacketCluster) { pc.Spec.VIPManager = infrav1.VIPManagerKubeVIP })
		Eventually(clusterCondition(pc, infrav1.ControlPlaneEndpointReadyCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.ControlPlaneEndpointRequiredReason, "set spec.vip to claim one from an IPAM pool, or spec.controlPlaneEndpoint.host"))
		Eventually(clusterCondition(pc, infrav1.ReadyCondition)).Should(HaveField("Status", metav1.ConditionFalse))
		pc = getCluster(pc)
		Expect(pc.Status.Initialization.Provisioned).To(BeNil())
		Expect(pc.Status.FailureDomains).To(HaveLen(1))
		Expect(reservationsOf(pc)).To(BeEmpty())

		By("taking the host once the user sets it")
		base := pc.DeepCopy()
		pc.Spec.ControlPlaneEndpoint.Host = userEndpoint
		Expect(k8s.Patch(ctx, pc, client.MergeFrom(base))).To(Succeed())
		Eventually(clusterCondition(pc, infrav1.ControlPlaneEndpointReadyCondition)).Should(haveCondition(metav1.ConditionTrue, infrav1.ControlPlaneEndpointSetByUserReason, userEndpoint+":6443"))
		Eventually(clusterCondition(pc, infrav1.ReadyCondition)).Should(HaveField("Status", metav1.ConditionTrue))
		Eventually(provisioned(pc)).Should(HaveValue(BeTrue()))
	})

	It("names the missing credentials Secret, and goes at once since it never reserved anything", func() {
		pc := packetCluster(ns, func(pc *infrav1.PacketCluster) {
			pc.Spec.CredentialsRef = &corev1.LocalObjectReference{Name: "no-such-secret"}
		})
		Eventually(clusterCondition(pc, infrav1.ControlPlaneEndpointReadyCondition)).Should(haveCondition(metav1.ConditionFalse,
			infrav1.CredentialsSecretNotFoundReason, "Secret no-such-secret (PacketCluster cluster spec.credentialsRef) not found"))
		Expect(getCluster(pc).Status.Initialization.Provisioned).To(BeNil())
		Expect(k8s.Delete(ctx, pc)).To(Succeed())
		Eventually(gone(pc)).Should(BeTrue())
	})
})

var _ = Describe("The endpoint a CPEM PacketCluster reserved", func() {
	It("is routed to the first active control-plane device only, retried when refused, and freed with that device", func() {
		ns := newNamespace()
		pc := packetCluster(ns, nil)
		Eventually(clusterCondition(pc, infrav1.ControlPlaneEndpointReadyCondition)).Should(haveCondition(metav1.ConditionTrue, infrav1.ControlPlaneEndpointReservedReason, ""))
		res := reservationsOf(getCluster(pc))
		Expect(res).To(HaveLen(1))
		endpoint := res[0].GetAddress()
		ports := []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{{VXLAN: simtest.NodesVXLAN, Address: "10.60.5.5/24"}}}}
		routedTo := routedTo(res[0].GetId())

		By("routing it to the first control-plane device, after the platform refused once")
		// The simulator counts the calls of the whole suite: other specs
		// route endpoints too.
		assignments := metalSim.Calls(sim.OpCreateIPAssignment)
		metalSim.FailNext(sim.OpCreateIPAssignment, 1, http.StatusUnprocessableEntity, 0)
		first, firstPM := machineFixture(ns, "cp-1", ports)
		controlPlane(first)
		setBootstrapData(first, bootstrapData)
		Eventually(condition(firstPM, infrav1.ControlPlaneEndpointAssignedCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.EndpointAssignRefusedReason, "the platform refused to route the endpoint "+endpoint))
		Eventually(condition(firstPM, infrav1.ControlPlaneEndpointAssignedCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.EndpointAssignedReason, endpoint))
		firstDevice := device.DeviceID(get(firstPM).Spec.ProviderID)
		Expect(routedTo()).To(Equal([]string{firstDevice}))
		Expect(metalSim.Calls(sim.OpCreateIPAssignment) - assignments).To(Equal(2))
		Eventually(func() []clusterv1.MachineAddress { return get(firstPM).Status.Addresses }).Should(
			ContainElement(clusterv1.MachineAddress{Type: clusterv1.MachineExternalIP, Address: endpoint}))

		By("leaving it where it is for a second control-plane machine, and out of a worker's way")
		second, secondPM := machineFixture(ns, "cp-2", ports)
		controlPlane(second)
		worker, workerPM := machineFixture(ns, "worker", ports)
		setBootstrapData(second, bootstrapData)
		setBootstrapData(worker, bootstrapData)
		Eventually(condition(secondPM, infrav1.ControlPlaneEndpointAssignedCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.EndpointAssignedElsewhereReason, firstDevice))
		Eventually(condition(workerPM, infrav1.VLANsAttachedCondition)).Should(HaveField("Status", metav1.ConditionTrue))
		Consistently(condition(workerPM, infrav1.ControlPlaneEndpointAssignedCondition), "2s").Should(BeNil())
		Expect(routedTo()).To(Equal([]string{firstDevice}))
		Expect(metalSim.Calls(sim.OpCreateIPAssignment) - assignments).To(Equal(2))

		By("freeing it with the first device; the cluster then releases the reservation")
		for _, pm := range []*infrav1.PacketMachine{firstPM, secondPM, workerPM} {
			Expect(k8s.Delete(ctx, pm)).To(Succeed())
		}
		Eventually(deviceGone(firstDevice)).Should(BeTrue())
		Expect(routedTo()).To(BeEmpty())
		for _, pm := range []*infrav1.PacketMachine{firstPM, secondPM, workerPM} {
			Eventually(gone(pm)).Should(BeTrue())
		}
		Expect(k8s.Delete(ctx, getCluster(pc))).To(Succeed())
		Eventually(gone(pc)).Should(BeTrue())
		Expect(reservationsOf(pc)).To(BeEmpty())
	})
})

var _ = Describe("The endpoint of a CPEM cluster whose control plane is initialized", func() {
	It("goes, once its holder is deleted, to a control-plane machine whose node joined, never to one whose node has not", func() {
		ns := newNamespace()
		pc := packetCluster(ns, nil)
		Eventually(clusterCondition(pc, infrav1.ControlPlaneEndpointReadyCondition)).Should(haveCondition(metav1.ConditionTrue, infrav1.ControlPlaneEndpointReservedReason, ""))
		res := reservationsOf(getCluster(pc))
		Expect(res).To(HaveLen(1))
		endpoint, routedTo := res[0].GetAddress(), routedTo(res[0].GetId())
		ports := []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{{VXLAN: simtest.NodesVXLAN, Address: "10.60.5.5/24"}}}}
		machines := map[string]*infrav1.PacketMachine{}
		nodes := map[string]*clusterv1.Machine{}
		for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
			nodes[name], machines[name] = machineFixture(ns, name, ports)
			kubeadmControlPlaneMachine(nodes[name], machines[name])
			setBootstrapData(nodes[name], bootstrapData)
			if name == "cp-1" {
				Eventually(condition(machines[name], infrav1.ControlPlaneEndpointAssignedCondition)).Should(
					haveCondition(metav1.ConditionTrue, infrav1.EndpointAssignedReason, endpoint))
				joined(nodes[name])
				controlPlaneInitialized(ns)
			}
		}
		holder := device.DeviceID(get(machines["cp-1"]).Spec.ProviderID)
		for _, name := range []string{"cp-2", "cp-3"} {
			Eventually(condition(machines[name], infrav1.ControlPlaneEndpointAssignedCondition)).Should(
				haveCondition(metav1.ConditionTrue, infrav1.EndpointAssignedElsewhereReason, holder))
			// Its node reports: the machine is done, and its device is next
			// read at the steady poll, minutes away.
			Expect(metalSim.PostUserState(device.DeviceID(get(machines[name]).Spec.ProviderID), "succeeded", 1001, "network_configuration_success")).To(Succeed())
			Eventually(condition(machines[name], infrav1.NodeNetworkConfiguredCondition)).Should(
				haveCondition(metav1.ConditionTrue, infrav1.NodeNetworkConfiguredReason, "network_configuration_success"))
		}

		By("deleting the holder while no other node has joined: the endpoint stays unrouted")
		Expect(k8s.Delete(ctx, machines["cp-1"])).To(Succeed())
		Eventually(gone(machines["cp-1"])).Should(BeTrue())
		for _, name := range []string{"cp-2", "cp-3"} {
			Eventually(condition(machines[name], infrav1.ControlPlaneEndpointAssignedCondition)).Should(
				haveCondition(metav1.ConditionFalse, infrav1.EndpointNotRoutedReason, endpoint))
		}
		Consistently(routedTo, "3s").Should(BeEmpty())

		By("routing it to the machine whose node joins")
		joined(nodes["cp-3"])
		Eventually(condition(machines["cp-3"], infrav1.ControlPlaneEndpointAssignedCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.EndpointAssignedReason, endpoint))
		Expect(routedTo()).To(Equal([]string{device.DeviceID(get(machines["cp-3"]).Spec.ProviderID)}))

		for _, name := range []string{"cp-2", "cp-3"} {
			Expect(k8s.Delete(ctx, machines[name])).To(Succeed())
			Eventually(gone(machines[name])).Should(BeTrue())
		}
		Expect(k8s.Delete(ctx, getCluster(pc))).To(Succeed())
		Eventually(gone(pc)).Should(BeTrue())
		Expect(reservationsOf(pc)).To(BeEmpty())
	})
})

// routedTo reads which devices the reservation id routes its address to.
func routedTo(id string) func() []string {
	return func() []string {
		GinkgoHelper()
		got, err := metalAPI.GetIPReservation(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		var ids []string
		for _, a := range got.GetAssignments() {
			ids = append(ids, path.Base(a.AssignedTo.GetHref()))
		}
		return ids
	}
}

// kubeadmControlPlaneMachine labels the Machine and its PacketMachine as
// KubeadmControlPlane labels those it makes.
func kubeadmControlPlaneMachine(machine *clusterv1.Machine, pm *infrav1.PacketMachine) {
	GinkgoHelper()
	controlPlane(machine)
	base := pm.DeepCopy()
	pm.Labels[clusterv1.MachineControlPlaneLabel] = ""
	Expect(k8s.Patch(ctx, pm, client.MergeFrom(base))).To(Succeed())
}

// joined records, as Cluster API's machine controller does, that the
// machine's node joined the cluster.
func joined(machine *clusterv1.Machine) {
	GinkgoHelper()
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(machine), machine)).To(Succeed())
	base := machine.DeepCopy()
	machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: machine.Name}
	Expect(k8s.Status().Patch(ctx, machine, client.MergeFrom(base))).To(Succeed())
}

// controlPlaneInitialized records, as Cluster API's cluster controller
// does, that the namespace's Cluster has a control plane.
func controlPlaneInitialized(ns string) {
	GinkgoHelper()
	cluster := &clusterv1.Cluster{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cluster"}, cluster)).To(Succeed())
	base := cluster.DeepCopy()
	cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	Expect(k8s.Status().Patch(ctx, cluster, client.MergeFrom(base))).To(Succeed())
}
