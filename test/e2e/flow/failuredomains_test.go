package flow

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// TestControlPlaneSpreadOverFailureDomains spreads a cluster's control
// plane the way KubeadmControlPlane does, which cannot run here without a
// kubeadm bootstrap: three control-plane Machines, each with
// spec.failureDomain set to one of the PacketCluster's three facilities.
// Cluster API's core manager copies the failure domains to the Cluster and
// provisions the machines; each device lands in its Machine's facility. In
// a second cluster, spread over metros, a machine whose VLAN its metro
// lacks, and one naming a failure domain the cluster does not have, are
// refused before any device is made.
func TestControlPlaneSpreadOverFailureDomains(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(3 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	ctx := context.Background()

	env, metalAPI := startManagementCluster(ctx, t, g)
	k8s := env.Client

	const spread = "spread"
	facilities := []string{simtest.Metro + "11", simtest.Metro + "12", simtest.Metro + "13"}
	ns, err := env.NewNamespace(ctx, spread)
	g.Expect(err).NotTo(HaveOccurred())
	objs := clusterObjects(ns, spread)
	for _, f := range facilities {
		objs = append(objs, controlPlaneMachine(ns, spread, spread+"-control-plane-"+f, f)...)
	}
	for _, obj := range objs {
		if pc, ok := obj.(*infrav1.PacketCluster); ok {
			for _, f := range facilities {
				pc.Spec.FailureDomains = append(pc.Spec.FailureDomains, infrav1.FailureDomainSpec{Facility: f})
			}
		}
		g.Expect(k8s.Create(ctx, obj)).To(Succeed(), "creating %T %s", obj, obj.GetName())
	}

	t.Log("the Cluster has the PacketCluster's failure domains, every one for the control plane")
	cluster := &clusterv1.Cluster{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: spread}, cluster)).To(Succeed())
		g.Expect(cluster.Status.FailureDomains).To(HaveLen(len(facilities)))
		for i, fd := range cluster.Status.FailureDomains {
			g.Expect(fd.Name).To(Equal(facilities[i]))
			g.Expect(fd.ControlPlane).To(HaveValue(BeTrue()), fd.Name)
			g.Expect(fd.Attributes).To(Equal(map[string]string{"facility": facilities[i], "metro": simtest.Metro}))
		}
	}).Should(Succeed())

	t.Log("each control-plane Machine's device is in its failure domain's facility")
	g.Eventually(func(g Gomega) {
		machines := &clusterv1.MachineList{}
		g.Expect(k8s.List(ctx, machines, client.InNamespace(ns))).To(Succeed())
		g.Expect(machines.Items).To(HaveLen(len(facilities)))
		for _, m := range machines.Items {
			g.Expect(ptr.Deref(m.Status.Initialization.InfrastructureProvisioned, false)).To(BeTrue(), "Machine %s provisioned", m.Name)
			d, err := metalAPI.GetDevice(ctx, device.DeviceID(m.Spec.ProviderID))
			g.Expect(err).NotTo(HaveOccurred())
			facility := d.GetFacility()
			g.Expect(facility.GetCode()).To(Equal(m.Spec.FailureDomain), "the device of Machine %s", m.Name)
		}
	}).Should(Succeed())
	g.Expect(metalAPI.devices(ctx, g, spread)).To(HaveLen(len(facilities)), "one device per Machine, no other")
	created := metalAPI.sim.Calls(sim.OpCreateDevice)

	const metros = "metros"
	t.Log("a cluster over metros: a device in the metro of its failure domain; none where the VLAN is missing or the failure domain unknown")
	ns, err = env.NewNamespace(ctx, metros)
	g.Expect(err).NotTo(HaveOccurred())
	objs = clusterObjects(ns, metros)
	machine := func(failureDomain string) string { return metros + "-control-plane-" + failureDomain }
	for _, fd := range []string{simtest.Metro, "sv", "ny"} {
		objs = append(objs, controlPlaneMachine(ns, metros, machine(fd), fd)...)
	}
	for _, obj := range objs {
		if pc, ok := obj.(*infrav1.PacketCluster); ok {
			pc.Spec.FailureDomains = []infrav1.FailureDomainSpec{{Metro: simtest.Metro}, {Metro: "sv"}}
		}
		g.Expect(k8s.Create(ctx, obj)).To(Succeed(), "creating %T %s", obj, obj.GetName())
	}
	deviceReady := func(name string) func(Gomega) *metav1.Condition {
		return func(g Gomega) *metav1.Condition {
			pm := &infrav1.PacketMachine{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pm)).To(Succeed())
			return conditions.Get(pm, infrav1.DeviceReadyCondition)
		}
	}
	g.Eventually(deviceReady(machine("sv"))).Should(And(
		HaveField("Reason", infrav1.VLANNotFoundReason),
		HaveField("Message", And(
			ContainSubstring(`the Machine's failure domain "sv" places the device in metro sv`),
			ContainSubstring(fmt.Sprintf("spec.ports[0].networks[0] (vxlan %d)", simtest.NodesVXLAN)),
			ContainSubstring(fmt.Sprintf("VLAN %d is in metro da, ny, not in the device's metro sv", simtest.NodesVXLAN)),
		)),
	), "the network, the VLAN and the failure domain named")
	g.Eventually(deviceReady(machine("ny"))).Should(And(
		HaveField("Reason", infrav1.FailureDomainNotFoundReason),
		HaveField("Message", ContainSubstring(`spec.failureDomain "ny" is not a failure domain of PacketCluster metros (it has da, sv)`)),
	))
	g.Eventually(func(g Gomega) {
		d, err := metalAPI.GetDevice(ctx, device.DeviceID(providerIDs(ctx, g, k8s, ns)["Machine/"+machine(simtest.Metro)]))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d.Metro.GetCode()).To(Equal(simtest.Metro))
	}).Should(Succeed(), "the machine in failure domain da has its device there")
	g.Expect(metalAPI.devices(ctx, g, metros)).To(HaveLen(1), "no device for the refused machines")
	g.Expect(metalAPI.sim.Calls(sim.OpCreateDevice)).To(Equal(created+1), "the refused machines asked for no device")
	for _, name := range []string{machine("sv"), machine("ny")} {
		g.Expect(providerIDs(ctx, g, k8s, ns)).To(HaveKeyWithValue("PacketMachine/"+name, ""))
	}
}
