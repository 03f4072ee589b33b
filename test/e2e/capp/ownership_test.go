package capp

import (
	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// The attacks of one tenant (a namespace) on another's Metal objects in a
// shared project: each points a field the tenant writes at an object it
// does not own, and the provider must read it, say so, and leave it alone.
var _ = Describe("A tenant pointing at another tenant's Metal objects", func() {
	It("cannot adopt another machine's device by spec.providerID, nor delete it with its machine", func() {
		victimNS, thiefNS := newNamespace(), newNamespace()
		victim := readyMachine(victimNS, "victim", nil, nil)
		Eventually(condition(victim, infrav1.DeviceReadyCondition)).Should(haveCondition(metav1.ConditionTrue, infrav1.DeviceActiveReason, ""))
		stolen := get(victim).Spec.ProviderID

		By("a machine of another namespace naming the device")
		thief := readyMachine(thiefNS, "thief", nil, func(pm *infrav1.PacketMachine) { pm.Spec.ProviderID = stolen })
		Eventually(condition(thief, infrav1.DeviceReadyCondition)).Should(haveCondition(metav1.ConditionFalse, infrav1.DeviceNotOwnedReason, "spec.providerID \""+stolen+"\""))
		Expect(conditionMessage(thief)).To(ContainSubstring("lacks the tag"))

		By("a second machine of the victim's own namespace naming it while its machine lives")
		twin := readyMachine(victimNS, "twin", nil, func(pm *infrav1.PacketMachine) { pm.Spec.ProviderID = stolen })
		Eventually(condition(twin, infrav1.DeviceReadyCondition)).Should(haveCondition(metav1.ConditionFalse, infrav1.DeviceNotOwnedReason, "still exists"))

		By("deleting both: the machines go, the device stays")
		for _, pm := range []*infrav1.PacketMachine{thief, twin} {
			Expect(k8s.Delete(ctx, pm)).To(Succeed())
			Eventually(gone(pm)).Should(BeTrue())
		}
		dev, err := metalAPI.GetDevice(ctx, device.DeviceID(stolen))
		Expect(err).NotTo(HaveOccurred(), "the victim's device was deleted")
		Expect(dev.GetState()).To(Equal(metalv1.DEVICESTATE_ACTIVE))
		Expect(get(victim).Spec.ProviderID).To(Equal(stolen))
		Expect(k8s.Delete(ctx, victim)).To(Succeed())
		Eventually(deviceGone(device.DeviceID(stolen))).Should(BeTrue())
	})

	It("cannot take or release another cluster's endpoint reservation by naming it in the annotation", func() {
		victimNS, thiefNS := newNamespace(), newNamespace()
		victim := packetCluster(victimNS, nil)
		Eventually(provisioned(victim)).Should(HaveValue(BeTrue()))
		res := reservationsOf(getCluster(victim))
		Expect(res).To(HaveLen(1))
		id := res[0].GetId()

		thief := packetCluster(thiefNS, func(pc *infrav1.PacketCluster) {
			pc.Annotations = map[string]string{infrav1.EndpointReservationAnnotation: id}
		})
		Eventually(clusterCondition(thief, infrav1.ControlPlaneEndpointReadyCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.EndpointReservationNotOwnedReason, id))
		Expect(getCluster(thief).Spec.ControlPlaneEndpoint.Host).To(BeEmpty(), "the thief got the victim's address as its endpoint")

		By("a control-plane machine of the thief's cluster, active: the address is not routed to it")
		thief = getCluster(thief)
		base := thief.DeepCopy()
		thief.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: userEndpoint, Port: 6443}
		Expect(k8s.Patch(ctx, thief, client.MergeFrom(base))).To(Succeed())
		cp, pm := machineFixture(thiefNS, "cp", nil)
		controlPlane(cp)
		setBootstrapData(cp, bootstrapData)
		Eventually(condition(pm, infrav1.ControlPlaneEndpointAssignedCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.EndpointReservationNotOwnedReason, id))
		routed, err := metalAPI.GetIPReservation(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(routed.GetAssignments()).To(BeEmpty(), "the victim's address was routed to the thief's device")

		By("deleting the thief's cluster: the reservation stays")
		Expect(k8s.Delete(ctx, pm)).To(Succeed())
		Eventually(gone(pm)).Should(BeTrue())
		Expect(k8s.Delete(ctx, getCluster(thief))).To(Succeed())
		Eventually(gone(thief)).Should(BeTrue())
		_, err = metalAPI.GetIPReservation(ctx, id)
		Expect(err).NotTo(HaveOccurred(), "the victim's reservation was released")
		Expect(k8s.Delete(ctx, getCluster(victim))).To(Succeed())
		Eventually(gone(victim)).Should(BeTrue())
	})

	It("cannot write the provider's identifying tags into spec.tags, nor a providerID of another form or a changed one", func() {
		ns := newNamespace()
		for _, tag := range []string{device.MachineTagPrefix + "0b1e9f1c-0000-4000-8000-000000000001", device.ClusterTagPrefix + "victim", "capp:machine-uid:victim"} {
			pm := &infrav1.PacketMachine{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tags"},
				Spec:       infrav1.PacketMachineSpec{Plan: "c3.small.x86", OperatingSystem: "ubuntu_24_04", Tags: []string{"team:storage", tag}},
			}
			Expect(k8s.Create(ctx, pm)).To(MatchError(And(ContainSubstring("spec.tags"), ContainSubstring("tag "+tag+" is reserved"))))
		}
		for _, id := range []string{"equinixmetal://not-a-device", "aws:///i-0123", simtest.Project} {
			pm := &infrav1.PacketMachine{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pid"},
				Spec:       infrav1.PacketMachineSpec{Plan: "c3.small.x86", OperatingSystem: "ubuntu_24_04", ProviderID: id},
			}
			Expect(k8s.Create(ctx, pm)).To(MatchError(And(ContainSubstring("spec.providerID"), ContainSubstring(id+" is not equinixmetal://<device UUID>"))))
		}
		pm := &infrav1.PacketMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pid"},
			Spec:       infrav1.PacketMachineSpec{Plan: "c3.small.x86", OperatingSystem: "ubuntu_24_04", ProviderID: device.ProviderID("6f1c2a4e-0000-4000-8000-000000000001")},
		}
		Expect(k8s.Create(ctx, pm)).To(Succeed())
		for _, change := range []string{device.ProviderID("6f1c2a4e-0000-4000-8000-000000000002"), ""} {
			base := pm.DeepCopy()
			changed := pm.DeepCopy()
			changed.Spec.ProviderID = change
			Expect(k8s.Patch(ctx, changed, client.MergeFrom(base))).To(MatchError(ContainSubstring("is immutable once set")))
		}
	})
})

func conditionMessage(pm *infrav1.PacketMachine) string {
	GinkgoHelper()
	c := condition(pm, infrav1.DeviceReadyCondition)()
	Expect(c).NotTo(BeNil())
	return c.Message
}
