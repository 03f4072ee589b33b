package capp

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// The machines of this table pass admission but cannot get usable
// addresses: each ends in an IPAddressClaimed condition that names the field
// or the pool and the value, and holds no address beyond what its valid
// networks need.
var _ = Describe("Bad input a PacketMachine can only report", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	addressesIn := func(ns string) int {
		GinkgoHelper()
		var list ipamv1.IPAddressList
		Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		return len(list.Items)
	}

	DescribeTable("ends in a condition naming the field or the pool and the value",
		func(networks []infrav1.Network, reason string, addresses int, messages ...string) {
			createPools(ns)
			_, pm := machineFixture(ns, "m", []infrav1.Port{{Name: "bond0", Networks: networks}})
			Eventually(condition(pm, infrav1.IPAddressClaimedCondition)).Should(haveCondition(metav1.ConditionFalse, reason, ""))
			Eventually(func() string { return condition(pm, infrav1.IPAddressClaimedCondition)().Message }).Should(And(
				ContainSubstring(messages[0]), ContainSubstring(messages[len(messages)-1])))
			message := condition(pm, infrav1.IPAddressClaimedCondition)().Message
			for _, m := range messages {
				Expect(message).To(ContainSubstring(m))
			}
			Expect(condition(pm, infrav1.IPAddressClaimsFulfilledCondition)()).To(haveCondition(metav1.ConditionFalse, fulfilledReason(reason), messages[0]))
			Consistently(func() int { return addressesIn(ns) }, time.Second).Should(Equal(addresses))
			Expect(get(pm).Status.UserDataSecretName).To(BeEmpty(), "nothing is rendered from unusable addresses")
		},
		Entry("a pool that does not exist", []infrav1.Network{{VXLAN: 1000, AddressFromPool: poolRef(v1alpha1.MetalVRFIPPoolKind, "missing")}},
			infrav1.WaitingForIPAddressReason, 0,
			`IPAddressClaim m-port-0-network-0 waits on pool "missing" of kind "MetalVRFIPPool"`, `MetalVRFIPPool "missing" not found`),
		Entry("a pool kind in the wrong case", []infrav1.Network{{VXLAN: 1000, AddressFromPool: poolRef("metalvrfippool", "vrf-v4")}},
			infrav1.PoolKindNotServedReason, 0,
			`the API server serves no kind "metalvrfippool" in apiGroup "ipam.cluster.x-k8s.io"`,
			"fix spec.ports[0].networks[0].addressFromPool", "(did you mean kind MetalVRFIPPool?)"),
		Entry("a pool kind nobody serves", []infrav1.Network{{VXLAN: 1000, AddressFromPool: poolRef("MetalVRFPool", "vrf-v4")}},
			infrav1.PoolKindNotServedReason, 0,
			`waits on pool "vrf-v4" of kind "MetalVRFPool"`, `the API server serves no kind "MetalVRFPool"`, "no IPAM provider answers the claim"),
		Entry("a pool apiGroup nobody serves", []infrav1.Network{{VXLAN: 1000, AddressFromPool: &corev1.TypedLocalObjectReference{
			APIGroup: ptr.To("ipam.example.com"), Kind: v1alpha1.MetalVRFIPPoolKind, Name: "vrf-v4",
		}}}, infrav1.PoolKindNotServedReason, 0,
			`in apiGroup "ipam.example.com"`, "fix spec.ports[0].networks[0].addressFromPool"),
		Entry("one valid and one unserved pool: only the valid network holds an address", []infrav1.Network{
			{VXLAN: 1000, AddressFromPool: poolRef(v1alpha1.MetalVRFIPPoolKind, "vrf-v4")},
			{VXLAN: 1001, AddressFromPool: poolRef("MetalVRFPool", "vrf-v4")},
		}, infrav1.PoolKindNotServedReason, 1, "1/2 bound", `IPAddressClaim m-port-0-network-1 waits on pool "vrf-v4" of kind "MetalVRFPool"`),
		Entry("two addresses of one family from pools on one vxlan", []infrav1.Network{
			{VXLAN: 1000, AddressFromPool: poolRef(v1alpha1.MetalVRFIPPoolKind, "vrf-v4")},
			{VXLAN: 1000, AddressFromPool: poolRef("InClusterIPPool", "incluster")},
		}, infrav1.IPAddressInvalidReason, 2,
			"spec.ports[0].networks[1]: address 10.70.0.10/24 is the second IPv4 address on bond0.1000, after the one of spec.ports[0].networks[0]"),
		Entry("a static network address given with a netmask", []infrav1.Network{{VXLAN: 1000, Address: "10.1.0.0", Netmask: "255.255.255.0"}},
			infrav1.IPAddressInvalidReason, 0,
			"spec.ports[0].networks[0]: address 10.1.0.0/24 is the network address of its subnet 10.1.0.0/24"),
		Entry("a static broadcast address", []infrav1.Network{{VXLAN: 1000, Address: "10.1.0.255/24"}},
			infrav1.IPAddressInvalidReason, 0,
			"spec.ports[0].networks[0]: address 10.1.0.255/24 is the broadcast address of its subnet 10.1.0.0/24"),
	)

	// What the spec alone shows wrong is refused when the machine is
	// written, not reported after its claims are made.
	DescribeTable("refuses a static network the spec alone shows unusable, naming the field and the value",
		func(network infrav1.Network, field, message string) {
			pm := &infrav1.PacketMachine{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"},
				Spec: infrav1.PacketMachineSpec{Plan: "c3.small.x86", OperatingSystem: "ubuntu_24_04",
					Ports: []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{network}}}},
			}
			err := k8s.Create(ctx, pm)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid rejection, got %v", err)
			Expect(err.Error()).To(ContainSubstring(field + ": "))
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("a gateway outside the subnet", infrav1.Network{VXLAN: 1000, Address: "10.1.0.5/24", Gateway: "10.1.1.1"},
			"spec.ports[0].networks[0].gateway", "10.1.1.1 lies outside the subnet 10.1.0.0/24 of the address 10.1.0.5/24"),
		Entry("a gateway of the other family", infrav1.Network{VXLAN: 1000, Address: "10.1.0.5/24", Gateway: "fd00::1"},
			"spec.ports[0].networks[0].gateway", "fd00::1 is IPv6 but the address 10.1.0.5/24 is IPv4"),
		Entry("a route gateway off the subnet", infrav1.Network{VXLAN: 1000, Address: "10.1.0.5/24", Gateway: "10.1.0.1",
			Routes: []infrav1.RouteSpec{{Destination: "10.9.0.0/16"}, {Destination: "192.168.0.0/16", Gateway: "10.2.0.1"}}},
			"spec.ports[0].networks[0].routes", "route to 192.168.0.0/16: gateway 10.2.0.1 is not reachable on the subnet 10.1.0.0/24 of the address 10.1.0.5/24"),
		Entry("a gateway outside the subnet its netmask gives", infrav1.Network{VXLAN: 1000, Address: "10.1.0.5", Netmask: "255.255.255.248", Gateway: "10.1.0.9"},
			"spec.ports[0].networks[0].gateway", "10.1.0.9 lies outside the subnet 10.1.0.0/29 of the address 10.1.0.5 with netmask 255.255.255.248"),
		Entry("a route gateway off the subnet its netmask gives", infrav1.Network{VXLAN: 1000, Address: "10.1.0.5", Netmask: "255.255.255.0", Gateway: "10.1.0.1",
			Routes: []infrav1.RouteSpec{{Destination: "192.168.0.0/16", Gateway: "10.1.1.1"}}},
			"spec.ports[0].networks[0].routes", "route to 192.168.0.0/16: gateway 10.1.1.1 is not reachable on the subnet 10.1.0.0/24 of the address 10.1.0.5 with netmask 255.255.255.0"),
		Entry("a prefix length the netmask contradicts", infrav1.Network{VXLAN: 1000, Address: "10.1.0.5/25", Netmask: "255.255.255.0"},
			"spec.ports[0].networks[0].netmask", "255.255.255.0 is a /24, but the address 10.1.0.5/25 has the prefix length /25"),
		Entry("a netmask with a hole", infrav1.Network{VXLAN: 1000, Address: "10.1.0.5", Netmask: "255.0.255.0"},
			"spec.ports[0].networks[0].netmask", "255.0.255.0 is not a netmask"),
		Entry("a nameserver that is a name", infrav1.Network{VXLAN: 1000, Address: "10.1.0.5/24", Nameservers: []string{"10.1.0.53", "dns.example.net"}},
			"spec.ports[0].networks[0].nameservers[1]", "dns.example.net is not an IP address in canonical form"),
		Entry("four nameservers", infrav1.Network{VXLAN: 1000, Address: "10.1.0.5/24", Nameservers: []string{"10.1.0.50", "10.1.0.51", "10.1.0.52", "10.1.0.53"}},
			"spec.ports[0].networks[0].nameservers", "Too many: 4: must have at most 3 items"),
	)

	It("says that no IPAM provider answers a claim of a kind the API server serves but nothing reconciles", func() {
		crd := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": "examplepools.pools.example.com"},
			"spec": map[string]any{
				"group": "pools.example.com", "scope": "Namespaced",
				"names": map[string]any{"plural": "examplepools", "singular": "examplepool", "kind": "ExamplePool", "listKind": "ExamplePoolList"},
				"versions": []any{map[string]any{
					"name": "v1", "served": true, "storage": true,
					"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
				}},
			},
		}}
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, crd))).To(Succeed())
		Eventually(func() error {
			_, err := k8s.RESTMapper().RESTMapping(schema.GroupKind{Group: "pools.example.com", Kind: "ExamplePool"})
			return err
		}).Should(Succeed())

		createPools(ns)
		_, pm := machineFixture(ns, "m", []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{{VXLAN: 1000, AddressFromPool: &corev1.TypedLocalObjectReference{
			APIGroup: ptr.To("pools.example.com"), Kind: "ExamplePool", Name: "example",
		}}}}})
		Eventually(condition(pm, infrav1.IPAddressClaimedCondition), 2*time.Minute).Should(haveCondition(metav1.ConditionFalse,
			infrav1.NoIPAMProviderAnswerReason, `no IPAM provider has answered for`))
		Expect(condition(pm, infrav1.IPAddressClaimedCondition)().Message).To(And(
			ContainSubstring(`waits on pool "example" of kind "ExamplePool" (apiGroup "pools.example.com")`),
			ContainSubstring(`is the provider of "ExamplePool" installed and running`)))
		Expect(addressesIn(ns)).To(BeZero())
	})
})

// fulfilledReason is the IPAddressClaimsFulfilled reason of an
// IPAddressClaimed reason.
func fulfilledReason(reason string) string {
	if reason == infrav1.WaitingForIPAddressReason {
		return infrav1.IPAddressClaimsNotFulfilledReason
	}
	return reason
}
