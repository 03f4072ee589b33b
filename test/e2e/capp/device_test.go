package capp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// hybridPorts is a machine in the simulator's metro: bond0 carries the
// nodes VLAN (an address from a MetalVRFIPPool on the Metal Gateway's
// subnet) and the load balancer VLAN; eth1, out of the bond, carries the
// plain VLAN.
func hybridPorts() []infrav1.Port {
	return []infrav1.Port{
		{Name: "bond0", Networks: []infrav1.Network{
			{VXLAN: simtest.NodesVXLAN, AddressType: infrav1.AddressTypeInternal, AddressFromPool: poolRef(v1alpha1.MetalVRFIPPoolKind, "nodes")},
			{VXLAN: 1002, Address: "10.61.0.5/28", Gateway: "10.61.0.1"},
		}},
		{Name: "eth1", Networks: []infrav1.Network{{VXLAN: 1003, Address: "192.168.3.5/24"}}},
	}
}

func createNodesPool(ns string) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &v1alpha1.MetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodes"},
		Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.60.1.2-10.60.1.6"}, Prefix: ptr.To[int32](29), Gateway: "10.60.1.1"},
	})).To(Succeed())
}

// readyMachine creates a machine with its bootstrap data, so it goes all the
// way to its device.
func readyMachine(ns, name string, ports []infrav1.Port, edit func(*infrav1.PacketMachine)) *infrav1.PacketMachine {
	GinkgoHelper()
	machine, pm := machineFixture(ns, name, ports)
	return ready(machine, pm, edit)
}

// ready edits pm (when edit is not nil), then plays the bootstrap provider
// of machine, so that no reconcile of the device sees pm unedited.
func ready(machine *clusterv1.Machine, pm *infrav1.PacketMachine, edit func(*infrav1.PacketMachine)) *infrav1.PacketMachine {
	GinkgoHelper()
	if edit != nil {
		base := pm.DeepCopy()
		edit(pm)
		Expect(k8s.Patch(ctx, pm, client.MergeFrom(base))).To(Succeed())
	}
	setBootstrapData(machine, bootstrapData)
	return pm
}

func get(pm *infrav1.PacketMachine) *infrav1.PacketMachine {
	GinkgoHelper()
	current := &infrav1.PacketMachine{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pm), current)).To(Succeed())
	return current
}

// devicesOf are the simulator's devices carrying the machine's tag.
func devicesOf(pm *infrav1.PacketMachine) []metalv1.Device {
	GinkgoHelper()
	devices, err := metalAPI.ListDevices(ctx, metal.DeviceFilter{Tag: device.MachineTagPrefix + string(get(pm).UID)})
	Expect(err).NotTo(HaveOccurred())
	return devices
}

func providerID(pm *infrav1.PacketMachine) func() string {
	return func() string { return get(pm).Spec.ProviderID }
}

func gone(obj client.Object) func() bool {
	return func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)) }
}

func deviceGone(id string) func() bool {
	return func() bool {
		_, err := metalAPI.GetDevice(ctx, id)
		return metal.IsNotFound(err)
	}
}

func claimsOf(ns string) []ipamv1.IPAddressClaim {
	GinkgoHelper()
	claims := &ipamv1.IPAddressClaimList{}
	Expect(k8s.List(ctx, claims, client.InNamespace(ns))).To(Succeed())
	return claims.Items
}

// vlansOf are the VLAN IDs port carries, and whether it is in the bond.
func vlansOf(d *metalv1.Device, port string) ([]string, bool) {
	for _, p := range d.GetNetworkPorts() {
		if p.GetName() != port {
			continue
		}
		var ids []string
		for _, vn := range p.GetVirtualNetworks() {
			ids = append(ids, vn.GetId()+strings.TrimPrefix(vn.GetHref(), "/metal/v1/virtual-networks/"))
		}
		data := p.GetData()
		return ids, data.GetBonded()
	}
	Fail("no port " + port)
	return nil, false
}

// asNode plays the node: it reads its metadata and posts a user state, from
// this host's loopback address, which the simulator maps to the device.
func asNode(deviceID, state string, code int, message string) {
	GinkgoHelper()
	Expect(metalSim.BindNode(netip.MustParseAddr("127.0.0.1"), deviceID)).To(Succeed())
	resp, err := http.Get(metalSim.URL + "/metadata")
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	Expect(resp.StatusCode).To(Equal(http.StatusOK))
	var md struct {
		ID           string `json:"id"`
		UserStateURL string `json:"user_state_url"`
	}
	Expect(json.NewDecoder(resp.Body).Decode(&md)).To(Succeed())
	Expect(md.ID).To(Equal(deviceID))
	body, _ := json.Marshal(map[string]any{"state": state, "code": code, "message": message})
	post, err := http.Post(md.UserStateURL, "application/json", bytes.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	defer post.Body.Close()
	out, _ := io.ReadAll(post.Body)
	Expect(post.StatusCode).To(BeNumerically("<", 300), string(out))
}

var _ = Describe("A PacketMachine's device", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("is created with the user-data, gets its VLANs in one batch per port, follows the node's report, and goes before the claims", func() {
		createNodesPool(ns)
		creates := metalSim.Calls(sim.OpCreateDevice)
		batches := metalSim.Calls(sim.OpCreatePortVlanAssignmentBatch)
		disbonds := metalSim.Calls(sim.OpDisbondPort)
		pm := readyMachine(ns, "hybrid", hybridPorts(), func(pm *infrav1.PacketMachine) {
			pm.Spec.Tags = []string{"team:storage"}
			pm.Spec.SSHKeys = []string{"ssh-ed25519 AAAAC3Nza test@example"}
		})

		By("creating the device, recording its providerID, and saying it is provisioning")
		Eventually(providerID(pm)).Should(HavePrefix(device.ProviderIDPrefix))
		id := device.DeviceID(get(pm).Spec.ProviderID)
		Expect(devicesOf(pm)).To(HaveLen(1))
		dev, err := metalAPI.GetDevice(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		secret := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: controllers.UserDataSecretName("hybrid")}, secret)).To(Succeed())
		Expect(dev.GetUserdata()).To(Equal(string(secret.Data[controllers.UserDataKey])))
		Expect(dev.GetHostname()).To(Equal("hybrid"))
		Expect(dev.GetTags()).To(ContainElements("team:storage", device.ClusterTagPrefix+"cluster", device.WorkerTag,
			device.MachineTagPrefix+string(get(pm).UID)))
		Expect(dev.GetMetro().Code).To(Equal(ptr.To(simtest.Metro)))

		By("attaching the VLANs: eth1 out of the bond, one batch per port")
		Eventually(condition(pm, infrav1.VLANsAttachedCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.VLANsAttachedReason, "bond0: 1001, 1002; eth1: 1003"))
		Expect(condition(pm, infrav1.DeviceReadyCondition)()).To(haveCondition(metav1.ConditionTrue, infrav1.DeviceActiveReason, id))
		// Conditions are patched apart from the rest of the status.
		Eventually(func() *bool { return get(pm).Status.Initialization.Provisioned }).Should(Equal(ptr.To(true)))
		dev, err = metalAPI.GetDevice(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		bond0, _ := vlansOf(dev, "bond0")
		Expect(bond0).To(ConsistOf(simtest.NodesVLAN, simtest.LBVLAN))
		eth1, bonded := vlansOf(dev, "eth1")
		Expect(eth1).To(ConsistOf(simtest.PlainVLAN))
		Expect(bonded).To(BeFalse())
		Expect(metalSim.Calls(sim.OpCreateDevice) - creates).To(Equal(1))
		Expect(metalSim.Calls(sim.OpCreatePortVlanAssignmentBatch) - batches).To(Equal(2))
		Expect(metalSim.Calls(sim.OpDisbondPort) - disbonds).To(Equal(1))

		By("reporting the device's and the VLANs' addresses")
		addresses := get(pm).Status.Addresses
		Expect(addresses).To(ContainElement(clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: "10.60.1.2"}))
		Expect(addresses).To(ContainElement(clusterv1.MachineAddress{Type: clusterv1.MachineHostName, Address: "hybrid"}))
		Expect(addresses).To(ContainElement(HaveField("Type", clusterv1.MachineExternalIP)))

		By("waiting for the node, then following its report")
		Expect(condition(pm, infrav1.NodeNetworkConfiguredCondition)()).To(
			haveCondition(metav1.ConditionFalse, infrav1.WaitingForNodeReason, "has not reported"))
		Expect(condition(pm, infrav1.ReadyCondition)()).To(HaveField("Status", metav1.ConditionFalse))
		asNode(id, "running", 1000, "network_configuration_started")
		Eventually(condition(pm, infrav1.NodeNetworkConfiguredCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.WaitingForNodeReason, "started configuring"))
		asNode(id, "succeeded", 1001, "network_configuration_success")
		Eventually(condition(pm, infrav1.NodeNetworkConfiguredCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.NodeNetworkConfiguredReason, "network_configuration_success"))
		Eventually(condition(pm, infrav1.ReadyCondition)).Should(HaveField("Status", metav1.ConditionTrue))
		current := get(pm)
		for _, t := range []string{infrav1.IPAddressClaimedCondition, infrav1.BootstrapDataRenderedCondition, infrav1.DeviceReadyCondition,
			infrav1.VLANsAttachedCondition, infrav1.NodeNetworkConfiguredCondition, infrav1.ReadyCondition} {
			Expect(conditions.Get(current, t).ObservedGeneration).To(Equal(current.Generation), t)
		}

		By("deleting the device first, keeping the claim until the platform has no device")
		Expect(k8s.Delete(ctx, pm)).To(Succeed())
		Eventually(condition(pm, infrav1.DeletingCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.DeletingDeviceReason, "waiting for device "+id))
		_, err = metalAPI.GetDevice(ctx, id)
		Expect(err).NotTo(HaveOccurred(), "the device is being deprovisioned")
		Expect(claimsOf(ns)).To(HaveLen(1), "the claim is released before the device is gone")
		Eventually(gone(pm)).Should(BeTrue())
		Expect(deviceGone(id)()).To(BeTrue())
		Expect(claimsOf(ns)).To(BeEmpty())
	})

	It("retries through 503 and 429 storms without a second device or an early release", func() {
		createNodesPool(ns)
		// Each storm is a 429 with Retry-After and 503s, more than the
		// client's own retries (2 attempts a call) absorb.
		metalSim.FailNext(sim.OpCreateDevice, 1, http.StatusTooManyRequests, time.Second)
		metalSim.FailNext(sim.OpCreateDevice, 2, http.StatusServiceUnavailable, 0)
		metalSim.FailNext(sim.OpCreatePortVlanAssignmentBatch, 2, http.StatusTooManyRequests, time.Second)
		metalSim.FailNext(sim.OpCreatePortVlanAssignmentBatch, 1, http.StatusServiceUnavailable, 0)
		pm := readyMachine(ns, "storm", hybridPorts()[:1], nil)

		Eventually(condition(pm, infrav1.DeviceReadyCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.MetalAPIErrorReason, "creating the device: metal createDevice: 503"))
		Eventually(condition(pm, infrav1.VLANsAttachedCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.VLANsAttachedReason, "bond0: 1001, 1002"))
		Expect(devicesOf(pm)).To(HaveLen(1))
		id := device.DeviceID(get(pm).Spec.ProviderID)
		dev, err := metalAPI.GetDevice(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		list, err := metalAPI.ListVLANAssignmentBatches(ctx, dev.GetNetworkPorts()[0].GetId())
		Expect(err).NotTo(HaveOccurred())
		Expect(list).To(HaveLen(1), "one batch for the port, however often the API refused")

		metalSim.FailNext(sim.OpDeleteDevice, 1, http.StatusTooManyRequests, time.Second)
		metalSim.FailNext(sim.OpDeleteDevice, 3, http.StatusServiceUnavailable, 0)
		Expect(k8s.Delete(ctx, pm)).To(Succeed())
		Eventually(condition(pm, infrav1.DeletingCondition)).Should(
			haveCondition(metav1.ConditionTrue, infrav1.DeletingDeviceReason, "503"))
		Expect(claimsOf(ns)).To(HaveLen(1), "a claim was released while the device exists")
		Eventually(gone(pm)).Should(BeTrue())
		Expect(deviceGone(id)()).To(BeTrue())
		Expect(claimsOf(ns)).To(BeEmpty())
	})

	It("waits for a creation slot rather than exceed the platform's limit", func() {
		rejected := metalSim.Answers(sim.OpCreateDevice, http.StatusTooManyRequests)
		var machines []*infrav1.PacketMachine
		for i := range 7 {
			machines = append(machines, readyMachine(ns, fmt.Sprintf("burst-%d", i), nil, func(pm *infrav1.PacketMachine) {
				if i%2 == 0 {
					// Upstream CAPP's field names drive the device alike.
					pm.Spec.Plan, pm.Spec.MachineType = "", "m3.large.x86"
					pm.Spec.OperatingSystem, pm.Spec.OS = "", "flatcar_stable"
				}
			}))
		}
		Eventually(func() int {
			waiting := 0
			for _, pm := range machines {
				if c := condition(pm, infrav1.DeviceReadyCondition)(); c != nil && c.Reason == infrav1.WaitingForCreationSlotReason {
					waiting++
				}
			}
			return waiting
		}).Should(BeNumerically(">", 0), "no machine waited for a slot")
		for _, pm := range machines {
			Eventually(condition(pm, infrav1.DeviceReadyCondition)).Should(haveCondition(metav1.ConditionTrue, infrav1.DeviceActiveReason, ""))
		}
		Expect(metalSim.Answers(sim.OpCreateDevice, http.StatusTooManyRequests)-rejected).To(BeZero(), "the platform answered 429")
		upstream, err := metalAPI.GetDevice(ctx, device.DeviceID(get(machines[0]).Spec.ProviderID))
		Expect(err).NotTo(HaveOccurred())
		Expect(upstream.GetPlan().Slug).To(Equal(ptr.To("m3.large.x86")))
		Expect(upstream.GetOperatingSystem().Slug).To(Equal(ptr.To("flatcar_stable")))
		for _, pm := range machines {
			Expect(k8s.Delete(ctx, pm)).To(Succeed())
		}
		for _, pm := range machines {
			Eventually(gone(pm)).Should(BeTrue())
		}
	})

	It("adopts the device a stopped manager created but never recorded, instead of creating another", func() {
		By("refusing the providerID write, as when the manager dies right after the create call")
		policy := &admissionv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "refuse-provider-id-" + ns},
			Spec: admissionv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: ptr.To(admissionv1.Fail),
				MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{
						Operations: []admissionv1.OperationType{admissionv1.Update},
						Rule: admissionv1.Rule{APIGroups: []string{infrav1.GroupVersion.Group}, APIVersions: []string{"*"},
							Resources: []string{"packetmachines"}},
					},
				}}},
				Validations: []admissionv1.Validation{{
					Expression: fmt.Sprintf("object.metadata.namespace != '%s' || !has(object.spec.providerID)", ns),
					Message:    "providerID refused by the test",
				}},
			},
		}
		Expect(k8s.Create(ctx, policy)).To(Succeed())
		binding := &admissionv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
			Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: policy.Name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			},
		}
		Expect(k8s.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func() {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, binding))).To(Succeed())
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, policy))).To(Succeed())
		})
		// The API server applies a new policy after a moment: probe with a
		// dry run until it refuses.
		probe := &infrav1.PacketMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
			Spec:       infrav1.PacketMachineSpec{Plan: "p", OperatingSystem: "os"},
		}
		Expect(k8s.Create(ctx, probe)).To(Succeed())
		Eventually(func() error {
			update := probe.DeepCopy()
			update.Spec.ProviderID = "equinixmetal://6f1c2a4e-0000-4000-8000-00000000b0be"
			return k8s.Patch(ctx, update, client.MergeFrom(probe), client.DryRunAll)
		}).Should(MatchError(ContainSubstring("providerID refused by the test")))
		Expect(k8s.Delete(ctx, probe)).To(Succeed())

		creates := metalSim.Calls(sim.OpCreateDevice)
		pm := readyMachine(ns, "adopted", nil, nil)
		Eventually(func() int { return len(devicesOf(pm)) }).Should(Equal(1))
		Consistently(providerID(pm), "2s").Should(BeEmpty())

		By("stopping the manager, lifting the refusal, and starting a new manager")
		stopCAPP()
		Expect(k8s.Delete(ctx, binding)).To(Succeed())
		Expect(k8s.Delete(ctx, policy)).To(Succeed())
		var err error
		stopCAPP, err = env.StartCAPP(ctx, cappOptions())
		Expect(err).NotTo(HaveOccurred())

		Eventually(providerID(pm)).Should(Equal(device.ProviderID(devicesOf(pm)[0].GetId())))
		Eventually(condition(pm, infrav1.DeviceReadyCondition)).Should(haveCondition(metav1.ConditionTrue, infrav1.DeviceActiveReason, ""))
		Expect(devicesOf(pm)).To(HaveLen(1))
		Expect(metalSim.Calls(sim.OpCreateDevice)-creates).To(Equal(1), "a second device was created")
		Expect(k8s.Delete(ctx, pm)).To(Succeed())
		Eventually(gone(pm)).Should(BeTrue())
	})

	It("says when the node reports a failure, and when it never reports", func() {
		failing := readyMachine(ns, "failing", nil, nil)
		silent := readyMachine(ns, "silent", nil, nil)
		Eventually(providerID(failing)).ShouldNot(BeEmpty())
		Eventually(condition(failing, infrav1.NodeNetworkConfiguredCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.WaitingForNodeReason, ""))
		Expect(metalSim.PostUserState(device.DeviceID(get(failing).Spec.ProviderID), "failed", 1002,
			"network_configuration_failed: ifup bond0.1001")).To(Succeed())
		Eventually(condition(failing, infrav1.NodeNetworkConfiguredCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.NodeNetworkFailedReason, "network_configuration_failed: ifup bond0.1001"))
		Eventually(condition(silent, infrav1.NodeNetworkConfiguredCondition), nodeReportTimeout+30*time.Second).Should(
			haveCondition(metav1.ConditionFalse, infrav1.TimeoutReason, "has not reported its network configuration within 40s"))
		for _, pm := range []*infrav1.PacketMachine{failing, silent} {
			Expect(k8s.Delete(ctx, pm)).To(Succeed())
			Eventually(gone(pm)).Should(BeTrue())
		}
	})
})

var _ = Describe("A PacketMachine with bad input", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	// expectRefused checks that pm ends with condition t False for reason,
	// with a message naming what is wrong, that no device exists for it,
	// and that deleting it leaves no claim.
	expectRefused := func(pm *infrav1.PacketMachine, t, reason string, message ...string) {
		GinkgoHelper()
		Eventually(condition(pm, t)).Should(haveCondition(metav1.ConditionFalse, reason, ""))
		for _, m := range message {
			Expect(condition(pm, t)().Message).To(ContainSubstring(m))
		}
		Expect(devicesOf(pm)).To(BeEmpty())
		Expect(k8s.Delete(ctx, pm)).To(Succeed())
		Eventually(gone(pm)).Should(BeTrue())
		Expect(claimsOf(ns)).To(BeEmpty())
	}

	It("names a VLAN that is in another metro, or nowhere, and creates no device", func() {
		createNodesPool(ns)
		ports := hybridPorts()
		// IPv6, so bond0.1001 holds one address of each family.
		ports[0].Networks[1] = infrav1.Network{VXLAN: simtest.NodesVXLAN, VLANID: simtest.NewYorkVLAN, Address: "fd00:61::5/64"}
		ports[1].Networks[0].VXLAN = 3999
		pm := readyMachine(ns, "vlans", ports, nil)
		expectRefused(pm, infrav1.DeviceReadyCondition, infrav1.VLANNotFoundReason,
			"spec.ports[0].networks[1] (vxlan 1001): VLAN "+simtest.NewYorkVLAN+" (vxlan 1001) is in metro ny, not in the device's metro da",
			"spec.ports[1].networks[0] (vxlan 3999): VLAN 3999 not found in metro da")
	})

	It("names a failure domain the cluster lacks, or one the PacketMachine contradicts, and creates no device", func() {
		clusterFixture(ns, func(pc *infrav1.PacketCluster) {
			pc.Spec.FailureDomains = []infrav1.FailureDomainSpec{{Facility: simtest.Metro + "11"}, {Facility: simtest.Metro + "12"}}
		})
		// inFailureDomain is a machine whose Machine names failureDomain
		// before it has bootstrap data, so no reconcile sees it without.
		inFailureDomain := func(name, failureDomain string, edit func(*infrav1.PacketMachine)) *infrav1.PacketMachine {
			machine, pm := machineFixture(ns, name, nil)
			base := machine.DeepCopy()
			machine.Spec.FailureDomain = failureDomain
			Expect(k8s.Patch(ctx, machine, client.MergeFrom(base))).To(Succeed())
			return ready(machine, pm, edit)
		}
		unknown := inFailureDomain("unknown", "ny5", nil)
		elsewhere := inFailureDomain("elsewhere", simtest.Metro+"11", func(pm *infrav1.PacketMachine) { pm.Spec.Facility = simtest.Metro + "12" })
		expectRefused(unknown, infrav1.DeviceReadyCondition, infrav1.FailureDomainNotFoundReason,
			`the Machine's spec.failureDomain "ny5" is not a failure domain of PacketCluster cluster (it has da11, da12)`)
		expectRefused(elsewhere, infrav1.DeviceReadyCondition, infrav1.FailureDomainConflictReason,
			`spec.facility "da12" places the device outside the Machine's failure domain "da11" (facility da11 of metro da)`)
	})

	It("names a port the device does not have, and deletes the device with the machine", func() {
		pm := readyMachine(ns, "eth2", []infrav1.Port{{Name: "eth2", Networks: []infrav1.Network{{VXLAN: 1003, Address: "192.168.3.5/24"}}}}, nil)
		Eventually(condition(pm, infrav1.VLANsAttachedCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.PortNotFoundReason, `spec.ports[0].name "eth2": device`))
		id := device.DeviceID(get(pm).Spec.ProviderID)
		Expect(k8s.Delete(ctx, pm)).To(Succeed())
		Eventually(gone(pm)).Should(BeTrue())
		Expect(deviceGone(id)()).To(BeTrue())
	})

	It("says why the platform failed the device or a port's batch, and deletes the device with the machine", func() {
		broken := readyMachine(ns, "broken", nil, func(pm *infrav1.PacketMachine) { pm.Spec.Plan = sim.FailProvisioningPlan })
		Eventually(condition(broken, infrav1.DeviceReadyCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.DeviceFailedReason, "failed to provision: Provisioning failed"))
		Expect(condition(broken, infrav1.DeviceReadyCondition)().Message).To(ContainSubstring(device.DeviceID(get(broken).Spec.ProviderID)))

		metalSim.FailBatches(1, "port bond0 is under maintenance")
		refused := readyMachine(ns, "refused", []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{{VXLAN: 1003, Address: "192.168.3.5/24"}}}}, nil)
		Eventually(condition(refused, infrav1.VLANsAttachedCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.VLANAttachFailedReason, "of port bond0 failed: port bond0 is under maintenance"))
		Consistently(func() int {
			dev, err := metalAPI.GetDevice(ctx, device.DeviceID(get(refused).Spec.ProviderID))
			Expect(err).NotTo(HaveOccurred())
			list, err := metalAPI.ListVLANAssignmentBatches(ctx, dev.GetNetworkPorts()[0].GetId())
			Expect(err).NotTo(HaveOccurred())
			return len(list)
		}, "6s").Should(Equal(1), "a failed batch is reported, not sent again")

		for _, pm := range []*infrav1.PacketMachine{broken, refused} {
			id := device.DeviceID(get(pm).Spec.ProviderID)
			Expect(k8s.Delete(ctx, pm)).To(Succeed())
			Eventually(gone(pm)).Should(BeTrue())
			Expect(deviceGone(id)()).To(BeTrue())
		}
	})

	It("names hardware reservations that do not exist or are taken, and takes the first free one of a list", func() {
		taken, err := metalAPI.CreateDevice(ctx, metal.DeviceRequest{Tag: "test:" + ns, Plan: simtest.ReservedPlan, Metro: simtest.Metro,
			OperatingSystem: "ubuntu_24_04", HardwareReservationID: simtest.HardwareReservation1})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(metalAPI.DeleteDevice(ctx, taken.GetId())).To(Succeed()) })

		missing := "d5a2c0de-0000-4000-8000-00000000ffff"
		pm := readyMachine(ns, "reserved", nil, func(pm *infrav1.PacketMachine) {
			pm.Spec.HardwareReservationID = missing + "," + simtest.HardwareReservation1
		})
		expectRefused(pm, infrav1.DeviceReadyCondition, infrav1.HardwareReservationUnavailableReason,
			`spec.hardwareReservationID "`+missing+","+simtest.HardwareReservation1+`"`,
			missing+" does not exist", simtest.HardwareReservation1+" is taken by device "+taken.GetId())

		pm = readyMachine(ns, "reserved-list", nil, func(pm *infrav1.PacketMachine) {
			pm.Spec.HardwareReservationID = simtest.HardwareReservation1 + ", " + simtest.HardwareReservation2
			pm.Spec.Facility = simtest.ReservedFacility
		})
		Eventually(providerID(pm)).ShouldNot(BeEmpty())
		dev, err := metalAPI.GetDevice(ctx, device.DeviceID(get(pm).Spec.ProviderID))
		Expect(err).NotTo(HaveOccurred())
		hr := dev.GetHardwareReservation()
		Expect(hr.GetId()).To(Equal(simtest.HardwareReservation2))
		facility := dev.GetFacility()
		Expect(facility.GetCode()).To(Equal(simtest.ReservedFacility))
		Expect(k8s.Delete(ctx, pm)).To(Succeed())
		Eventually(gone(pm)).Should(BeTrue())
	})

	It("names a project the credentials cannot reach", func() {
		clusterFixture(ns, func(pc *infrav1.PacketCluster) { pc.Spec.ProjectID = simtest.OtherProject })
		pm := readyMachine(ns, "project", nil, nil)
		expectRefused(pm, infrav1.DeviceReadyCondition, infrav1.ProjectNotFoundReason,
			"project "+simtest.OtherProject+" (spec.project, or the PacketCluster's spec.projectID)")
	})

	It("names a missing credentials Secret and a Secret without an apiKey", func() {
		clusterFixture(ns, func(pc *infrav1.PacketCluster) {
			pc.Spec.CredentialsRef = &corev1.LocalObjectReference{Name: "metal-credentials"}
		})
		pm := readyMachine(ns, "no-secret", nil, nil)
		expectRefused(pm, infrav1.DeviceReadyCondition, infrav1.CredentialsSecretNotFoundReason,
			"Secret metal-credentials (PacketCluster cluster spec.credentialsRef) not found")

		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "metal-credentials"},
			Data:       map[string][]byte{"token": []byte("x")},
		})).To(Succeed())
		pm = readyMachine(ns, "no-key", nil, nil)
		expectRefused(pm, infrav1.DeviceReadyCondition, infrav1.InvalidCredentialsReason, "metal-credentials", `"apiKey"`)
	})

	It("never writes a token to logs, events, conditions or status, good or refused", func() {
		good, bad := userToken, "refused-token-4b1d9c7e"
		clusterFixture(ns, func(pc *infrav1.PacketCluster) {
			pc.Spec.CredentialsRef = &corev1.LocalObjectReference{Name: "metal-credentials"}
		})
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "metal-credentials"},
			Data:       map[string][]byte{metal.SecretKeyAPIKey: []byte(bad)},
		}
		Expect(k8s.Create(ctx, secret)).To(Succeed())
		pm := readyMachine(ns, "tokens", hybridPorts()[1:], nil)
		Eventually(condition(pm, infrav1.DeviceReadyCondition)).Should(
			haveCondition(metav1.ConditionFalse, infrav1.InvalidCredentialsReason, "refused the credentials of Secret metal-credentials"))

		base := secret.DeepCopy()
		secret.Data[metal.SecretKeyAPIKey] = []byte(good)
		Expect(k8s.Patch(ctx, secret, client.MergeFrom(base))).To(Succeed())
		Eventually(condition(pm, infrav1.VLANsAttachedCondition), 2*time.Minute).Should(
			haveCondition(metav1.ConditionTrue, infrav1.VLANsAttachedReason, ""))

		status, err := json.Marshal(get(pm).Status)
		Expect(err).NotTo(HaveOccurred())
		events := &eventsv1.EventList{}
		Expect(k8s.List(ctx, events, client.InNamespace(ns))).To(Succeed())
		Expect(events.Items).NotTo(BeEmpty())
		recorded, err := json.Marshal(events.Items)
		Expect(err).NotTo(HaveOccurred())
		for _, token := range []string{good, bad} {
			Expect(string(status)).NotTo(ContainSubstring(token), "status and conditions")
			Expect(string(recorded)).NotTo(ContainSubstring(token), "events")
			Expect(logs.String()).NotTo(ContainSubstring(token), "logs")
		}
		Expect(k8s.Delete(ctx, pm)).To(Succeed())
		Eventually(gone(pm)).Should(BeTrue())
	})
})
