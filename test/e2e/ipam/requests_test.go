package ipam

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

var _ = Describe("Requesting a specific address", func() {
	var ns string
	BeforeEach(func() {
		ns = newNamespace()
		createPool(ns, "pool", poolSpec(24, "10.6.0.1", "10.6.0.0/24"))
	})

	requesting := func(name, address string) *ipamv1.IPAddressClaim {
		claim := newClaim(ns, name, poolKind, "pool")
		claim.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: address}
		Expect(k8s.Create(ctx, claim)).To(Succeed())
		return claim
	}
	failsWith := func(claim *ipamv1.IPAddressClaim, message string) {
		GinkgoHelper()
		Eventually(func() string { return reasonOf(claim) }).Should(Equal(ipamv1.IPAddressClaimReadyAllocationFailedReason))
		Expect(readyCondition(claim).Message).To(ContainSubstring(message))
	}

	It("hands out the requested address, and says why when it cannot", func() {
		wanted := requesting("wanted", "10.6.0.200")
		Expect(boundAddress(wanted).Spec.Address).To(Equal("10.6.0.200"))
		Expect(boundAddress(createClaim(ns, "plain", poolKind, "pool")).Spec.Address).To(Equal("10.6.0.2"),
			"claims without a request still get the lowest free address")

		failsWith(requesting("gateway", "10.6.0.1"), "requested address 10.6.0.1 is the pool's gateway (spec.gateway)")
		failsWith(requesting("outside", "10.7.0.5"), "requested address 10.7.0.5 lies outside every address the pool hands out")
		failsWith(requesting("garbage", "ten"), `annotation `+v1alpha1.RequestedAddressAnnotation+`: "ten" is not a plain IP address`)

		taken := requesting("taken", "10.6.0.200")
		failsWith(taken, "requested address 10.6.0.200 is held by claim "+ns+"/wanted")
		deleteAndWait(wanted)
		Expect(boundAddress(taken).Spec.Address).To(Equal("10.6.0.200"), "served once the holder released it")
	})
})

var _ = Describe("Requesting an address of a GlobalMetalVRFIPPool", func() {
	It("names a holder in another namespace only as such", func() {
		ns, other := newNamespace(), newNamespace()
		name := "requests-" + ns
		createGlobalPool(name, poolSpec(24, "", "10.6.2.0/24"))
		request := func(namespace string) *ipamv1.IPAddressClaim {
			claim := newClaim(namespace, "wanted", v1alpha1.GlobalMetalVRFIPPoolKind, name)
			claim.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: "10.6.2.10"}
			Expect(k8s.Create(ctx, claim)).To(Succeed())
			return claim
		}
		holder := request(ns)
		Expect(boundAddress(holder).Spec.Address).To(Equal("10.6.2.10"))

		taken := request(other)
		Eventually(func() string { return reasonOf(taken) }).Should(Equal(ipamv1.IPAddressClaimReadyAllocationFailedReason))
		message := readyCondition(taken).Message
		Expect(message).To(ContainSubstring("requested address 10.6.2.10 is held by a claim in another namespace"))
		Expect(message).NotTo(ContainSubstring(ns))
	})
})

var _ = Describe("A reuse grace period", func() {
	It("keeps a released address out of use for the period, then hands it out again", func() {
		ns := newNamespace()
		spec := poolSpec(24, "", "10.6.1.0/24")
		spec.AddressReuseGracePeriodSeconds = new(int32(6)) // long enough for a loaded machine to bind a claim meanwhile
		createPool(ns, "pool", spec)
		first := createClaim(ns, "first", poolKind, "pool")
		Expect(boundAddress(first).Spec.Address).To(Equal("10.6.1.1"))

		Expect(k8s.Delete(ctx, first)).To(Succeed())
		deleted := time.Now()
		Expect(boundAddress(createClaim(ns, "during", poolKind, "pool")).Spec.Address).To(Equal("10.6.1.2"),
			"the released address is not handed out during the period")
		held := client.ObjectKeyFromObject(first) // the IPAddress is named after its claim
		Consistently(func() error { return k8s.Get(ctx, held, &ipamv1.IPAddress{}) }, "1s", "100ms").
			Should(Succeed(), "the IPAddress's deletion waits out the period")

		Eventually(func() error { return k8s.Get(ctx, held, &ipamv1.IPAddress{}) }, "15s").ShouldNot(Succeed())
		Eventually(func() (map[string]string, error) { return env.AllocationRecords(ctx, ns) }).ShouldNot(HaveKey("10.6.1.1"))
		Expect(time.Since(deleted)).To(BeNumerically(">=", 6*time.Second))
		Expect(boundAddress(createClaim(ns, "after", poolKind, "pool")).Spec.Address).To(Equal("10.6.1.1"))
	})
})
