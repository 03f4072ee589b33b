package ipam

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

var _ = Describe("Validating pools", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	DescribeTable("rejects a bad spec with a message naming the field and the value",
		func(spec v1alpha1.MetalVRFIPPoolSpec, messages ...string) {
			pool := &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}, Spec: spec}
			err := k8s.Create(ctx, pool)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid rejection, got %v", err)
			for _, m := range messages {
				Expect(err.Error()).To(ContainSubstring(m))
			}
		},
		Entry("no addresses (schema rule)", v1alpha1.MetalVRFIPPoolSpec{Prefix: ptr.To[int32](24)},
			"spec.addresses: at least one address source is required"),
		Entry("no prefix (schema rule)", v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.0.0.0/24"}},
			"spec.prefix: required when spec.addresses is set"),
		Entry("gateway that is not an IP (schema rule)", poolSpec(24, "10.0.0.x", "10.0.0.0/24"),
			"spec.gateway", "must be an IP address"),
		Entry("unparseable entry", poolSpec(24, "", "10.0.0.0/24", "10.0.1.300"),
			`spec.addresses[1]: Invalid value: "10.0.1.300"`, "not a valid IP, range, nor CIDR"),
		Entry("mixed families", poolSpec(24, "", "10.0.0.0/24", "fd00::1"),
			`spec.addresses[1]: Invalid value: "fd00::1"`, "mixed IP families"),
		Entry("IPv4 prefix beyond 32", poolSpec(33, "", "10.0.0.0/24"),
			"spec.prefix: Invalid value: 33", "between 0 and 32 for IPv4"),
		Entry("gateway outside the subnet", poolSpec(24, "10.0.1.1", "10.0.0.0/24"),
			`spec.gateway: Invalid value: "10.0.1.1"`, "outside the pool's subnet 10.0.0.0/24"),
		Entry("gateway of the other family", poolSpec(24, "fd00::1", "10.0.0.0/24"),
			`spec.gateway: Invalid value: "fd00::1"`, "mixed IP families"),
		Entry("address outside the subnet", poolSpec(24, "", "10.0.0.0/24", "10.0.1.5"),
			`spec.addresses[1]: Invalid value: "10.0.1.5"`, "outside the pool's subnet 10.0.0.0/24"),
		Entry("overlapping entries", poolSpec(24, "", "10.0.0.0/25", "10.0.0.100-10.0.0.200"),
			`spec.addresses[1]: Invalid value: "10.0.0.100-10.0.0.200"`, `overlaps spec.addresses[0] ("10.0.0.0/25")`),
		Entry("excluded entry of the other family", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.0.0.0/24"}, Prefix: ptr.To[int32](24), ExcludedAddresses: []string{"fd00::/64"},
		}, `spec.excludedAddresses[0]: Invalid value: "fd00::/64"`, "mixed IP families"),
		Entry("excluded entry outside the pool", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.0.0.0/24"}, Prefix: ptr.To[int32](24), ExcludedAddresses: []string{"10.9.9.9"},
		}, `spec.excludedAddresses[0]: Invalid value: "10.9.9.9"`, "lies outside the pool's addresses: it excludes nothing"),
		Entry("excluded entry that is not one", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.0.0.0/24"}, Prefix: ptr.To[int32](24), ExcludedAddresses: []string{"10.0.0.5/33"},
		}, `spec.excludedAddresses[0]: Invalid value: "10.0.0.5/33"`, "not a valid IP, range, nor CIDR"),
		Entry("a range that runs backwards", poolSpec(24, "", "10.0.0.50-10.0.0.10"),
			`spec.addresses[0]: Invalid value: "10.0.0.50-10.0.0.10"`, "not a valid IP, range, nor CIDR"),
		Entry("IPv6 prefix beyond 128 (schema rule)", poolSpec(129, "", "fd00::/64"),
			"spec.prefix: Invalid value: 129", "less than or equal to 128"),
		Entry("a negative reuse grace period (schema rule)", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.0.0.0/24"}, Prefix: ptr.To[int32](24), AddressReuseGracePeriodSeconds: ptr.To[int32](-1),
		}, "spec.addressReuseGracePeriodSeconds: Invalid value: -1", "greater than or equal to 0"),
		Entry("a gateway that leaves nothing to hand out", poolSpec(32, "10.0.0.1", "10.0.0.1"),
			`spec.addresses: Invalid value: ["10.0.0.1"]`, "leaves no address to hand out"),
		Entry("credentials of another namespace", v1alpha1.MetalVRFIPPoolSpec{VRF: &v1alpha1.VRFSource{
			ID: "vrf-1", CredentialsRef: v1alpha1.SecretReference{Name: "metal", Namespace: "other"},
		}}, `spec.vrf.credentialsRef.namespace: Invalid value: "other"`, "reads Secrets of its own namespace"),
		Entry("a VRF family other than the addresses'", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.0.0.0/24"}, Prefix: ptr.To[int32](24),
			VRF: &v1alpha1.VRFSource{ID: "vrf-1", CredentialsRef: v1alpha1.SecretReference{Name: "metal"}, IPFamily: v1alpha1.IPv6Family},
		}, `spec.vrf.ipFamily: Invalid value: "IPv6"`, "but spec.addresses are IPv4"),
		Entry("a VRF scope that does not exist (schema rule)", v1alpha1.MetalVRFIPPoolSpec{
			VRF: &v1alpha1.VRFSource{ID: "vrf-1", CredentialsRef: v1alpha1.SecretReference{Name: "metal"}, Scope: "Everything"},
		}, "spec.vrf.scope: Unsupported value: \"Everything\"", "GatewaySubnets"),
		Entry("overlapping subnets", v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{
			{CIDR: "10.60.0.0/24"}, {CIDR: "10.60.0.0/23"},
		}}, `spec.subnets[1].cidr: Invalid value: "10.60.0.0/23": overlaps spec.subnets[0].cidr ("10.60.0.0/24")`),
		Entry("a subnet with host bits", v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{{CIDR: "10.60.1.5/24"}}},
			`spec.subnets[0].cidr: Invalid value: "10.60.1.5/24": has host bits set: the subnet is 10.60.1.0/24`),
		Entry("an address outside its subnet", v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{
			{CIDR: "10.60.1.0/24", Addresses: []string{"10.60.1.10-10.60.1.20", "10.60.2.5"}},
		}}, `spec.subnets[0].addresses[1]: Invalid value: "10.60.2.5": lies outside spec.subnets[0].cidr (10.60.1.0/24)`),
		Entry("a gateway outside its subnet", v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{
			{CIDR: "10.60.1.0/24", Gateway: "10.60.2.1"},
		}}, `spec.subnets[0].gateway: Invalid value: "10.60.2.1": lies outside spec.subnets[0].cidr (10.60.1.0/24)`),
		Entry("subnets of mixed families", v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{
			{CIDR: "10.60.1.0/24"}, {CIDR: "fd00:60::/64"},
		}}, `spec.subnets[1].cidr: Invalid value: "fd00:60::/64": is IPv6 but spec.subnets[0].cidr is IPv4: mixed IP families`),
		Entry("a subnet over the subnet of spec.addresses", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.60.0.0/24"}, Prefix: ptr.To[int32](23), Subnets: []v1alpha1.Subnet{{CIDR: "10.60.1.0/24"}},
		}, `spec.subnets[0].cidr: Invalid value: "10.60.1.0/24": overlaps the subnet of spec.addresses (10.60.0.0/23, spec.prefix around spec.addresses[0])`),
		Entry("a subnet's DNS server twice", v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{
			{CIDR: "10.60.1.0/24", DNSServers: []string{"10.60.1.53", "10.60.1.53"}},
		}}, `spec.subnets[0].dnsServers[1]: Duplicate value: "10.60.1.53"`),
		Entry("a subnet's DNS servers given twice", v1alpha1.MetalVRFIPPoolSpec{
			Subnets:          []v1alpha1.Subnet{{CIDR: "10.60.1.0/24", DNSServers: []string{"10.60.1.53"}}},
			SubnetDNSServers: []v1alpha1.SubnetDNSServers{{Subnet: "10.60.1.0/24", DNSServers: []string{"10.60.1.54"}}},
		}, `spec.subnetDNSServers[0].subnet: Invalid value: "10.60.1.0/24": is spec.subnets[0].cidr, whose DNS servers spec.subnets[0].dnsServers gives already`),
		Entry("a subnet that is not a CIDR (schema rule)", v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{{CIDR: "10.60.1.0"}}},
			"spec.subnets[0].cidr: Invalid value: ", `"10.60.1.0" is not a subnet in CIDR notation, e.g. 10.60.1.0/24`),
		Entry("a subnet's gateway that is not an IP (schema rule)", v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{{CIDR: "10.60.1.0/24", Gateway: "10.60.1.x"}}},
			"spec.subnets[0].gateway", "must be an IP address"),
		Entry("a subnet's address with a trailing space (schema rule)", v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{{CIDR: "10.60.1.0/24", Addresses: []string{"10.60.1.9 "}}}},
			`spec.subnets[0].addresses[0]: Invalid value: "10.60.1.9 ": "10.60.1.9 " has spaces around it: write "10.60.1.9"`),
		Entry("four DNS servers of a subnet (schema rule)", v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{
			{CIDR: "10.60.1.0/24", DNSServers: []string{"10.60.1.50", "10.60.1.51", "10.60.1.52", "10.60.1.53"}},
		}}, "spec.subnets[0].dnsServers: Too many: 4: must have at most 3 items"),
		Entry("an empty network name (schema rule)", v1alpha1.MetalVRFIPPoolSpec{
			NetworkRef: &v1alpha1.NetworkReference{Name: "demo"},
		}, `spec.networkRef.network: Invalid value: ""`, "at least 1 chars long"),
	)

	It("creates nothing of a pool whose subnets it refuses: a claim on it waits for the pool", func() {
		spec := v1alpha1.MetalVRFIPPoolSpec{Subnets: []v1alpha1.Subnet{{CIDR: "10.60.0.0/24"}, {CIDR: "10.60.0.128/25"}}}
		err := k8s.Create(ctx, &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pool"}, Spec: spec})
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring(`spec.subnets[1].cidr: Invalid value: "10.60.0.128/25": overlaps spec.subnets[0].cidr ("10.60.0.0/24")`))
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pool"}, &v1alpha1.MetalVRFIPPool{}))).To(BeTrue())

		claim := createClaim(ns, "claim", poolKind, "pool")
		Consistently(func(g Gomega) string {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
			return claim.Status.AddressRef.Name
		}, time.Second).Should(BeEmpty())
		var list ipamv1.IPAddressList
		Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		Expect(list.Items).To(BeEmpty())

		// The same pool, fixed, serves the claim.
		spec.Subnets[1].CIDR = "10.60.1.0/25"
		createPool(ns, "pool", spec)
		Expect(boundAddress(claim).Spec.Address).To(Equal("10.60.0.1"))
	})

	It("applies the same rules to GlobalMetalVRFIPPools", func() {
		err := k8s.Create(ctx, &v1alpha1.GlobalMetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Name: "bad-global-" + ns},
			Spec:       poolSpec(24, "192.168.0.1", "10.0.0.0/24"),
		})
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring(`spec.gateway: Invalid value: "192.168.0.1"`))
	})

	It("rejects an update that drops addresses in use, and accepts one that keeps them", func() {
		pool := createPool(ns, "pool", poolSpec(24, "", "10.2.0.0/24"))
		address := boundAddress(createClaim(ns, "claim", poolKind, "pool")).Spec.Address
		Expect(address).To(Equal("10.2.0.1"))

		// The pool's status changes as the claim binds: retry on a conflict,
		// which the API server reports before the webhook is asked.
		var err error
		Eventually(func() bool {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
			shrunk := pool.DeepCopy()
			shrunk.Spec.Addresses = []string{"10.2.0.100-10.2.0.200"}
			err = k8s.Update(ctx, shrunk)
			return apierrors.IsConflict(err)
		}).Should(BeFalse())
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.addresses: Forbidden: the update takes 1 addresses in use out of the pool"))
		Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("10.2.0.1 (IPAddress %s/claim)", ns)))

		excluded := pool.DeepCopy()
		excluded.Spec.ExcludedAddresses = []string{"10.2.0.1"}
		Expect(k8s.Update(ctx, excluded)).NotTo(Succeed(), "excluding an address in use drops it too")

		grown := pool.DeepCopy()
		grown.Spec.Addresses = []string{"10.2.0.0/24", "10.2.0.0/24"}
		Expect(k8s.Update(ctx, grown)).NotTo(Succeed(), "an invalid spec is rejected on update as well")
		// The manager may write the pool meanwhile: retry on a conflict.
		Eventually(func() bool {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
			kept := pool.DeepCopy()
			kept.Spec.Addresses = []string{"10.2.0.1-10.2.0.50"}
			err = k8s.Update(ctx, kept)
			return apierrors.IsConflict(err)
		}).Should(BeFalse())
		Expect(err).NotTo(HaveOccurred())
	})
})

var _ = Describe("Deleting a pool", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("is refused while addresses are in use, and allowed once they are released", func() {
		pool := createPool(ns, "pool", poolSpec(24, "", "10.3.0.0/24"))
		claim := createClaim(ns, "claim", poolKind, "pool")
		boundAddress(claim)

		err := k8s.Delete(ctx, pool)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("1 addresses of the pool are in use: 10.3.0.1 (IPAddress " + ns + "/claim)"))
		Expect(err.Error()).To(ContainSubstring(v1alpha1.SkipDeleteValidationAnnotation))

		deleteAndWait(claim)
		deleteAndWait(pool)
	})

	It("is allowed for clusterctl move", func() {
		pool := createPool(ns, "pool", poolSpec(24, "", "10.3.1.0/24"))
		boundAddress(createClaim(ns, "claim", poolKind, "pool"))
		patch := client.MergeFrom(pool.DeepCopy())
		pool.Annotations = map[string]string{clusterctlv1.DeleteForMoveAnnotation: ""}
		Expect(k8s.Patch(ctx, pool, patch)).To(Succeed())
		deleteAndWait(pool)
	})

	Context("when the webhook is not installed", func() {
		var saved []admissionregistrationv1.ValidatingWebhookConfiguration
		BeforeEach(func() {
			var list admissionregistrationv1.ValidatingWebhookConfigurationList
			Expect(k8s.List(ctx, &list)).To(Succeed())
			saved = list.Items
			for i := range saved {
				Expect(k8s.Delete(ctx, &saved[i])).To(Succeed())
			}
			Eventually(webhookActive).Should(BeFalse())
		})
		AfterEach(func() {
			for i := range saved {
				restored := saved[i].DeepCopy()
				restored.ResourceVersion, restored.UID = "", ""
				Expect(k8s.Create(ctx, restored)).To(Succeed())
			}
			Eventually(webhookActive).Should(BeTrue())
		})

		It("holds the pool with its finalizer until its addresses are released", func() {
			pool := createPool(ns, "pool", poolSpec(24, "", "10.3.2.0/24"))
			claim := createClaim(ns, "claim", poolKind, "pool")
			boundAddress(claim)
			Expect(k8s.Delete(ctx, pool)).To(Succeed())

			Eventually(func() string { return poolReady(pool).Reason }).Should(Equal("Deleting"))
			Expect(poolReady(pool).Message).To(ContainSubstring("Waiting for 1 IPAddresses to be released"))

			deleteAndWait(claim)
			Eventually(func() bool {
				return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool))
			}).Should(BeTrue())
		})

		It("reports a spec that does not resolve in the pool's Ready condition and on its claims", func() {
			createPool(ns, "pool", poolSpec(24, "10.9.9.9", "10.3.3.0/24"))
			pool := &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pool"}}
			Eventually(func() string { return poolReady(pool).Reason }).Should(Equal(v1alpha1.InvalidSpecReason))
			Expect(poolReady(pool).Message).To(ContainSubstring(`spec.gateway: Invalid value: "10.9.9.9"`))

			claim := createClaim(ns, "claim", poolKind, "pool")
			Eventually(func() string { return reasonOf(claim) }).Should(Equal(ipamv1.IPAddressClaimReadyPoolNotReadyReason))
			Expect(readyCondition(claim).Message).To(ContainSubstring("spec.gateway"))

			// Fixing the pool serves the waiting claim.
			patch := client.MergeFrom(pool.DeepCopy())
			pool.Spec.Gateway = "10.3.3.1"
			Expect(k8s.Patch(ctx, pool, patch)).To(Succeed())
			Expect(boundAddress(claim).Spec.Address).To(Equal("10.3.3.2"))
		})

		It("counts addresses the spec no longer holds as out of range, and keeps them allocated", func() {
			pool := createPool(ns, "pool", poolSpec(24, "", "10.3.4.0/24"))
			claim := createClaim(ns, "claim", poolKind, "pool")
			Expect(boundAddress(claim).Spec.Address).To(Equal("10.3.4.1"))

			patch := client.MergeFrom(pool.DeepCopy())
			pool.Spec.Addresses = []string{"10.3.4.100-10.3.4.101"}
			Expect(k8s.Patch(ctx, pool, patch)).To(Succeed())
			Eventually(func(g Gomega) {
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
				g.Expect(pool.Status.ObservedGeneration).To(Equal(pool.Generation))
				g.Expect(*pool.Status.IPAddresses).To(Equal(v1alpha1.IPAddressesSummary{Total: "2", Free: "2", Used: 1, OutOfRange: 1}))
			}).Should(Succeed())
			Expect(boundAddress(claim).Spec.Address).To(Equal("10.3.4.1"), "a shrinking pool never revokes an address")
		})
	})
})

// poolReady reads the pool and returns its Ready condition (empty when absent).
func poolReady(pool *v1alpha1.MetalVRFIPPool) metav1.Condition {
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
		return metav1.Condition{}
	}
	for _, c := range pool.Status.Conditions {
		if c.Type == v1alpha1.ReadyCondition {
			return c
		}
	}
	return metav1.Condition{}
}

// webhookActive reports whether the API server calls the pool webhook now:
// it changes with the webhook configuration only after a moment.
func webhookActive() bool {
	probe := &v1alpha1.MetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "webhook-probe"},
		Spec:       poolSpec(24, "10.0.1.1", "10.0.0.0/24"), // valid for the schema, not for the webhook
	}
	return k8s.Create(ctx, probe, client.DryRunAll) != nil
}
