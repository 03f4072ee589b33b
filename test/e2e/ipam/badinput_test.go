package ipam

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cappv1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// The bad-input table of the IPAM provider: every malformed or hostile
// object is either rejected with the field and the value named, or accepted
// and then told about in a condition that names them; and nothing is left
// half-done (no IPAddress for a claim that cannot be served).
var _ = Describe("Bad input to the IPAM provider", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	// expectNoAddresses checks that no IPAddress exists in the namespace, for
	// a while: what was refused or cannot be served holds nothing.
	expectNoAddresses := func() {
		GinkgoHelper()
		Consistently(func() []ipamv1.IPAddress {
			var list ipamv1.IPAddressList
			Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			return list.Items
		}, time.Second).Should(BeEmpty())
	}

	DescribeTable("an update that takes an address in use out of the pool is refused, naming the field that changed",
		func(spec v1alpha1.MetalVRFIPPoolSpec, edit func(*v1alpha1.MetalVRFIPPoolSpec), field, value string) {
			pool := createPool(ns, "pool", spec)
			claim := newClaim(ns, "claim", poolKind, "pool")
			claim.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: value}
			Expect(k8s.Create(ctx, claim)).To(Succeed())
			Expect(boundAddress(claim).Spec.Address).To(Equal(value))

			var err error
			Eventually(func() bool {
				Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
				changed := pool.DeepCopy()
				edit(&changed.Spec)
				err = k8s.Update(ctx, changed)
				return apierrors.IsConflict(err)
			}).Should(BeFalse())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
			Expect(err.Error()).To(ContainSubstring(field + ": Forbidden: the update takes 1 addresses in use out of the pool"))
			Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("%s (IPAddress %s/claim)", value, ns)))
			if field != "spec.addresses" {
				Expect(err.Error()).NotTo(ContainSubstring("spec.addresses:"), "the addresses did not change")
			}
		},
		Entry("excluding it", poolSpec(24, "", "10.20.0.0/24"),
			func(s *v1alpha1.MetalVRFIPPoolSpec) { s.ExcludedAddresses = []string{"10.20.0.9", "10.20.0.5"} },
			"spec.excludedAddresses[1]", "10.20.0.5"),
		Entry("moving the gateway onto it", poolSpec(24, "10.21.0.1", "10.21.0.0/24"),
			func(s *v1alpha1.MetalVRFIPPoolSpec) { s.Gateway = "10.21.0.7" },
			"spec.gateway", "10.21.0.7"),
		Entry("shrinking the addresses", poolSpec(24, "", "10.22.0.0/24"),
			func(s *v1alpha1.MetalVRFIPPoolSpec) { s.Addresses = []string{"10.22.0.100-10.22.0.200"} },
			"spec.addresses", "10.22.0.3"),
		Entry("no longer handing out the network address", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.23.0.0/24"}, Prefix: ptr.To[int32](24), AllocateReservedIPAddresses: true,
		}, func(s *v1alpha1.MetalVRFIPPoolSpec) { s.AllocateReservedIPAddresses = false },
			"spec.allocateReservedIPAddresses", "10.23.0.0"),
		Entry("a prefix that makes it a broadcast address", poolSpec(24, "", "10.24.0.0/24"),
			func(s *v1alpha1.MetalVRFIPPoolSpec) {
				s.Addresses = []string{"10.24.0.0/25"}
				s.Prefix = ptr.To[int32](25)
			},
			"spec.prefix", "10.24.0.127"),
	)

	DescribeTable("a claim whose requested address the pool cannot give says which rule keeps it out, and gets no IPAddress",
		func(requested string, reason string, messages ...string) {
			createPool(ns, "pool", v1alpha1.MetalVRFIPPoolSpec{
				Addresses: []string{"10.30.0.0/24"}, Prefix: ptr.To[int32](24), Gateway: "10.30.0.1",
				ExcludedAddresses: []string{"10.30.0.10"},
			})
			claim := newClaim(ns, "claim", poolKind, "pool")
			claim.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: requested}
			Expect(k8s.Create(ctx, claim)).To(Succeed())
			Eventually(func() *metav1.Condition { return readyCondition(claim) }).Should(And(
				Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", reason)))
			message := readyCondition(claim).Message
			Expect(message).To(ContainSubstring(v1alpha1.RequestedAddressAnnotation))
			for _, m := range messages {
				Expect(message).To(ContainSubstring(m))
			}
			Expect(message).NotTo(ContainSubstring("served once it is released"), "no release can serve it")
			expectNoAddresses()
		},
		Entry("outside the pool", "10.9.9.9", ipamv1.IPAddressClaimReadyAllocationFailedReason,
			"requested address 10.9.9.9 lies outside every address the pool hands out", `MetalVRFIPPool "pool"`),
		Entry("the gateway", "10.30.0.1", ipamv1.IPAddressClaimReadyAllocationFailedReason,
			"requested address 10.30.0.1 is the pool's gateway (spec.gateway)"),
		Entry("excluded", "10.30.0.10", ipamv1.IPAddressClaimReadyAllocationFailedReason,
			`requested address 10.30.0.10 is excluded by spec.excludedAddresses[0] ("10.30.0.10")`),
		Entry("of the other family", "fd00::5", ipamv1.IPAddressClaimReadyAllocationFailedReason,
			"requested address fd00::5 is IPv6 but the pool hands out IPv4 addresses"),
		Entry("the network address", "10.30.0.0", ipamv1.IPAddressClaimReadyAllocationFailedReason,
			"requested address 10.30.0.0 is the network address of subnet 10.30.0.0/24", "spec.allocateReservedIPAddresses"),
		Entry("the broadcast address", "10.30.0.255", ipamv1.IPAddressClaimReadyAllocationFailedReason,
			"requested address 10.30.0.255 is the broadcast address of subnet 10.30.0.0/24"),
		Entry("not an address", "10.30.0.x", ipamv1.IPAddressClaimReadyAllocationFailedReason,
			`"10.30.0.x" is not a plain IP address`),
		Entry("an address with a zone", "fe80::1%eth0", ipamv1.IPAddressClaimReadyAllocationFailedReason,
			`"fe80::1%eth0" is not a plain IP address`),
		Entry("40,000 characters, cut with its length said", strings.Repeat("1", 40000), ipamv1.IPAddressClaimReadyAllocationFailedReason,
			`"`+strings.Repeat("1", 128)+`"… (40000 bytes) is not a plain IP address`),
	)

	It("says of a requested address another claim holds that releasing it serves the claim", func() {
		createPool(ns, "pool", poolSpec(24, "", "10.31.0.0/24"))
		first := newClaim(ns, "first", poolKind, "pool")
		first.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: "10.31.0.7"}
		Expect(k8s.Create(ctx, first)).To(Succeed())
		boundAddress(first)
		second := newClaim(ns, "second", poolKind, "pool")
		second.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: "10.31.0.7"}
		Expect(k8s.Create(ctx, second)).To(Succeed())
		Eventually(func() string { return ptr.Deref(readyCondition(second), metav1.Condition{}).Message }).Should(And(
			ContainSubstring("requested address 10.31.0.7 is held by claim "+ns+"/first"),
			ContainSubstring("the claim is served once it is released")))
	})

	DescribeTable("a pool whose sources give nothing, or too much, says which source and field, and serves nothing it should not",
		func(networks []cappv1.NetworkSpec, spec v1alpha1.MetalVRFIPPoolSpec, condition, status, reason string, messages ...string) {
			Expect(k8s.Create(ctx, &cappv1.PacketCluster{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"},
				Spec:       cappv1.PacketClusterSpec{ProjectID: demoProject, Networks: networks},
			})).To(Succeed())
			pool := createPool(ns, "pool", spec)
			expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
				c := haveCondition(g, p, condition, metav1.ConditionStatus(status), reason)
				for _, m := range messages {
					g.Expect(c.Message).To(ContainSubstring(m))
				}
			})
			if status == string(metav1.ConditionFalse) {
				claim := createClaim(ns, "claim", poolKind, "pool")
				Eventually(func() string { return reasonOf(claim) }).Should(Equal(ipamv1.IPAddressClaimReadyPoolNotReadyReason))
				expectNoAddresses()
			}
		},
		Entry("a network without ipAddresses",
			[]cappv1.NetworkSpec{{Name: "nodes", Assignment: cappv1.AssignmentClusterAPI}},
			v1alpha1.MetalVRFIPPoolSpec{NetworkRef: &v1alpha1.NetworkReference{Name: "demo", Network: "nodes"}},
			v1alpha1.SourcesResolvedCondition, "False", v1alpha1.NetworkWithoutAddressesReason,
			`network "nodes" of PacketCluster demo gives the pool no address`, "spec.networks[0].ipAddresses is empty"),
		Entry("a network of the other family than the pool's gateway",
			[]cappv1.NetworkSpec{{Name: "nodes", Assignment: cappv1.AssignmentClusterAPI, IPAddresses: []string{"10.40.0.0/24"}}},
			v1alpha1.MetalVRFIPPoolSpec{NetworkRef: &v1alpha1.NetworkReference{Name: "demo", Network: "nodes"}, Prefix: ptr.To[int32](64), Gateway: "fd00:40::1"},
			v1alpha1.SourcesResolvedCondition, "False", v1alpha1.NetworkWithoutAddressesReason,
			`spec.networks[0].ipAddresses "10.40.0.0/24" are not IPv6, the family spec.gateway fixes`),
		Entry("the same, as the pool's Ready condition says it",
			[]cappv1.NetworkSpec{{Name: "nodes", Assignment: cappv1.AssignmentClusterAPI, IPAddresses: []string{"10.41.0.0/24"}}},
			v1alpha1.MetalVRFIPPoolSpec{NetworkRef: &v1alpha1.NetworkReference{Name: "demo", Network: "nodes"}, Prefix: ptr.To[int32](64), Gateway: "fd00:41::1"},
			v1alpha1.ReadyCondition, "False", v1alpha1.SourcesNotResolvedReason,
			`No address to hand out: network "nodes" of PacketCluster demo gives the pool no address`),
		Entry("a network name that is not there",
			[]cappv1.NetworkSpec{{Name: "nodes", Assignment: cappv1.AssignmentClusterAPI, IPAddresses: []string{"10.42.0.0/24"}}},
			v1alpha1.MetalVRFIPPoolSpec{NetworkRef: &v1alpha1.NetworkReference{Name: "demo", Network: "nodez"}},
			v1alpha1.SourcesResolvedCondition, "False", v1alpha1.NetworkNotFoundReason,
			`PacketCluster demo has no network "nodez" in spec.networks`),
		Entry("a PacketCluster that is not there",
			nil,
			v1alpha1.MetalVRFIPPoolSpec{NetworkRef: &v1alpha1.NetworkReference{Name: "dmeo", Network: "nodes"}},
			v1alpha1.SourcesResolvedCondition, "False", v1alpha1.PacketClusterNotFoundReason,
			"/dmeo not found (spec.networkRef)"),
		Entry("a network DHCP serves",
			[]cappv1.NetworkSpec{{Name: "nodes", Assignment: cappv1.AssignmentDHCP, IPAddresses: []string{"10.43.0.0/24"}}},
			v1alpha1.MetalVRFIPPoolSpec{NetworkRef: &v1alpha1.NetworkReference{Name: "demo", Network: "nodes"}},
			v1alpha1.SourcesResolvedCondition, "False", v1alpha1.NetworkNotClusterAPIReason,
			`network "nodes" of PacketCluster demo has assignment "dhcp"`, "set spec.networks[0].assignment: cluster-api"),
		Entry("an exclusion outside what the network gives",
			[]cappv1.NetworkSpec{{Name: "nodes", Assignment: cappv1.AssignmentClusterAPI, IPAddresses: []string{"10.44.0.0/24"}}},
			v1alpha1.MetalVRFIPPoolSpec{NetworkRef: &v1alpha1.NetworkReference{Name: "demo", Network: "nodes"}, ExcludedAddresses: []string{"10.9.9.9"}},
			v1alpha1.ReadyCondition, "True", v1alpha1.ReadyReason,
			`spec.excludedAddresses[0]: Invalid value: "10.9.9.9": lies outside the pool's addresses: it excludes nothing`),
	)

	DescribeTable("a pool with bad DNS servers or pre-allocations, or an entry with spaces around it, is refused naming the field and the value",
		func(spec v1alpha1.MetalVRFIPPoolSpec, messages ...string) {
			err := k8s.Create(ctx, &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}, Spec: spec})
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid rejection, got %v", err)
			for _, m := range messages {
				Expect(err.Error()).To(ContainSubstring(m))
			}
		},
		Entry("a DNS server that is a name", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.32.0.0/24"}, Prefix: ptr.To[int32](24), DNSServers: []string{"10.32.0.53", "dns.example.net"},
		}, `spec.dnsServers[1]: Invalid value: "dns.example.net": not an IP address`),
		Entry("four DNS servers (schema rule)", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.32.0.0/24"}, Prefix: ptr.To[int32](24), DNSServers: []string{"10.32.0.50", "10.32.0.51", "10.32.0.52", "10.32.0.53"},
		}, "spec.dnsServers: Too many: 4: must have at most 3 items"),
		Entry("a DNS server twice", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.32.0.0/24"}, Prefix: ptr.To[int32](24), DNSServers: []string{"10.32.0.53", "10.32.0.53"},
		}, `spec.dnsServers[1]: Duplicate value: "10.32.0.53"`),
		Entry("a DNS subnet with host bits", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.32.0.0/24"}, Prefix: ptr.To[int32](24),
			SubnetDNSServers: []v1alpha1.SubnetDNSServers{{Subnet: "10.32.0.5/24", DNSServers: []string{"10.32.0.53"}}},
		}, `spec.subnetDNSServers[0].subnet: Invalid value: "10.32.0.5/24": has host bits set: the subnet is 10.32.0.0/24`),
		Entry("a DNS subnet of the other family", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.32.0.0/24"}, Prefix: ptr.To[int32](24),
			SubnetDNSServers: []v1alpha1.SubnetDNSServers{{Subnet: "fd00:32::/64", DNSServers: []string{"fd00:32::53"}}},
		}, `spec.subnetDNSServers[0].subnet: Invalid value: "fd00:32::/64": is IPv6 but spec.addresses are IPv4`),
		Entry("a subnet's DNS server that is not an address", v1alpha1.MetalVRFIPPoolSpec{
			VRF:              &v1alpha1.VRFSource{ID: "vrf", CredentialsRef: v1alpha1.SecretReference{Name: "metal"}},
			SubnetDNSServers: []v1alpha1.SubnetDNSServers{{Subnet: "10.60.1.0/29", DNSServers: []string{"10.60.1.x"}}},
		}, `spec.subnetDNSServers[0].dnsServers[0]: Invalid value: "10.60.1.x": not an IP address`),
		Entry("a pre-allocated address outside the pool", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.32.0.0/24"}, Prefix: ptr.To[int32](24), Gateway: "10.32.0.1",
			PreAllocations: []v1alpha1.PreAllocation{{Machine: "cp-0", Address: "10.33.0.5"}},
		}, `spec.preAllocations[0].address: Invalid value: "10.33.0.5": lies outside every address the pool hands out`),
		Entry("the gateway pre-allocated", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.32.0.0/24"}, Prefix: ptr.To[int32](24), Gateway: "10.32.0.1",
			PreAllocations: []v1alpha1.PreAllocation{{Machine: "cp-0", Address: "10.32.0.1"}},
		}, `spec.preAllocations[0].address: Invalid value: "10.32.0.1": is the pool's gateway (spec.gateway)`),
		Entry("one address pre-allocated twice", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.32.0.0/24"}, Prefix: ptr.To[int32](24),
			PreAllocations: []v1alpha1.PreAllocation{{Machine: "cp-0", Address: "10.32.0.5"}, {HardwareReservation: "hr", Address: "10.32.0.5"}},
		}, `spec.preAllocations[1].address: Duplicate value: "10.32.0.5"`),
		Entry("one Machine given two addresses", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.32.0.0/24"}, Prefix: ptr.To[int32](24),
			PreAllocations: []v1alpha1.PreAllocation{{Machine: "cp-0", Address: "10.32.0.5"}, {Machine: "cp-0", Address: "10.32.0.6"}},
		}, `spec.preAllocations[1].machine: Duplicate value: "cp-0"`),
		Entry("a pre-allocation naming both a Machine and a reservation (schema rule)", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.32.0.0/24"}, Prefix: ptr.To[int32](24),
			PreAllocations: []v1alpha1.PreAllocation{{Machine: "cp-0", HardwareReservation: "hr", Address: "10.32.0.5"}},
		}, "spec.preAllocations[0]: Invalid value: exactly one of machine or hardwareReservation must be set"),
		Entry("a pre-allocation for another namespace", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.32.0.0/24"}, Prefix: ptr.To[int32](24),
			PreAllocations: []v1alpha1.PreAllocation{{Machine: "cp-0", Namespace: "other", Address: "10.32.0.5"}},
		}, `spec.preAllocations[0].namespace: Invalid value: "other": a MetalVRFIPPool serves claims of its own namespace`),
		Entry("an address with a leading space (schema rule)", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{" 10.32.0.0/24"}, Prefix: ptr.To[int32](24),
		}, `spec.addresses[0]: Invalid value: " 10.32.0.0/24": " 10.32.0.0/24" has spaces around it: write "10.32.0.0/24"`),
		Entry("an exclusion with a trailing space (schema rule)", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.32.0.0/24"}, Prefix: ptr.To[int32](24), ExcludedAddresses: []string{"10.32.0.9 "},
		}, `spec.excludedAddresses[0]: Invalid value: "10.32.0.9 ": "10.32.0.9 " has spaces around it: write "10.32.0.9"`),
	)

	It("says of a claim whose Cluster does not exist that it waits for it, and serves it once it does", func() {
		createPool(ns, "pool", poolSpec(24, "", "10.33.0.0/24"))
		claim := newClaim(ns, "claim", poolKind, "pool")
		claim.Spec.ClusterName = "nope"
		Expect(k8s.Create(ctx, claim)).To(Succeed())
		Eventually(func() *metav1.Condition { return readyCondition(claim) }).Should(And(Not(BeNil()),
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", "ClusterNotFound"),
			HaveField("Message", fmt.Sprintf(`spec.clusterName "nope": no Cluster of that name in namespace %s; the claim is served once the Cluster exists`, ns))))
		expectNoAddresses()
		Expect(k8s.Create(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nope"}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(false)}})).To(Succeed())
		Expect(boundAddress(claim).Spec.Address).To(Equal("10.33.0.1"))
	})

	It("tells the PacketCluster when its network shrinks under an address in use", func() {
		cluster := &cappv1.PacketCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"},
			Spec: cappv1.PacketClusterSpec{ProjectID: demoProject, Networks: []cappv1.NetworkSpec{
				{Name: "nodes", Assignment: cappv1.AssignmentClusterAPI, IPAddresses: []string{"10.34.0.0/24"}},
			}},
		}
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		createPool(ns, "pool", v1alpha1.MetalVRFIPPoolSpec{NetworkRef: &v1alpha1.NetworkReference{Name: "demo", Network: "nodes"}})
		Expect(boundAddress(createClaim(ns, "claim", poolKind, "pool")).Spec.Address).To(HavePrefix("10.34.0."))

		patch := client.MergeFrom(cluster.DeepCopy())
		cluster.Spec.Networks[0].IPAddresses = []string{"10.35.0.0/24"}
		Expect(k8s.Patch(ctx, cluster, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			var list eventsv1.EventList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.Regarding.Kind == "PacketCluster" && e.Regarding.Name == "demo" && e.Reason == "AddressesOutsideNetwork" {
					notes = append(notes, e.Note)
				}
			}
			g.Expect(notes).To(ContainElement(And(ContainSubstring(`network "nodes" no longer holds 1 addresses in use of MetalVRFIPPool pool`),
				ContainSubstring("they stay with their machines until released"))))
		}, time.Minute).Should(Succeed())
	})

	It("leaves claims of kinds no provider serves to their consumer: it writes nothing on them", func() {
		createPool(ns, "pool", poolSpec(24, "", "10.45.0.0/24"))
		var claims []*ipamv1.IPAddressClaim
		for i, ref := range []ipamv1.IPPoolReference{
			{APIGroup: v1alpha1.GroupVersion.Group, Kind: "metalvrfippool", Name: "pool"},
			{APIGroup: v1alpha1.GroupVersion.Group, Kind: "MetalVRFPool", Name: "pool"},
			{APIGroup: "ipam.example.com", Kind: poolKind, Name: "pool"},
		} {
			claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("claim-%d", i)}, Spec: ipamv1.IPAddressClaimSpec{PoolRef: ref}}
			Expect(k8s.Create(ctx, claim)).To(Succeed())
			claims = append(claims, claim)
		}
		// A claim of our kind, created last, is served: the provider has
		// seen the others by then.
		boundAddress(createClaim(ns, "ours", poolKind, "pool"))
		for _, claim := range claims {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
			Expect(claim.Status.Conditions).To(BeEmpty(), claim.Spec.PoolRef.Kind)
			Expect(claim.Finalizers).To(BeEmpty(), claim.Spec.PoolRef.Kind)
		}
	})
})
