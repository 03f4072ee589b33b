package ipam

import (
	"fmt"
	"net/netip"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// prefixSpec is an explicit prefix pool: prefixes of length out of addresses.
func prefixSpec(prefix int32, gateway string, length int32, addresses ...string) v1alpha1.MetalVRFIPPoolSpec {
	spec := poolSpec(prefix, gateway, addresses...)
	spec.AllocationPrefixLength = ptr.To(length)
	return spec
}

var _ = Describe("Allocating prefixes from a prefix pool", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("hands out the lowest free aligned /64s, skipping the gateway's and excluded ones, recorded, and reuses a released one", func() {
		spec := prefixSpec(48, "fd00:10::1", 64, "fd00:10::/48")
		spec.ExcludedAddresses = []string{"fd00:10:0:2::/64"}
		createPool(ns, "pool", spec)

		var claims []string
		for i, want := range []string{"fd00:10:0:1::", "fd00:10:0:3::", "fd00:10:0:4::"} {
			claim := createClaim(ns, fmt.Sprintf("node-%d", i), poolKind, "pool")
			address := boundAddress(claim) // one at a time, so the order is defined
			Expect(address.Spec.Address).To(Equal(want))
			Expect(address.Spec.Prefix).To(Equal(ptr.To[int32](64)))
			Expect(address.Spec.Gateway).To(BeEmpty(), "a prefix is a subnet of its own")
			claims = append(claims, claim.Name)
		}

		By("each prefix has a record saying its length")
		var records coordinationv1.LeaseList
		Expect(k8s.List(ctx, &records, client.InNamespace(testenv.AllocationNamespace), client.HasLabels{v1alpha1.AllocationClaimUIDLabel})).To(Succeed())
		lengths := map[string]string{}
		for _, r := range records.Items {
			if r.Annotations[v1alpha1.AllocationClaimAnnotation] == ns+"/"+claims[0] {
				lengths[r.Annotations[v1alpha1.AllocationAddressAnnotation]] = r.Annotations[v1alpha1.AllocationPrefixLengthAnnotation]
			}
		}
		Expect(lengths).To(Equal(map[string]string{"fd00:10:0:1::": "64"}))

		By("the counts are prefixes: 65,536 /64s less the gateway's and the excluded one")
		pool := &v1alpha1.MetalVRFIPPool{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pool"}, pool)).To(Succeed())
			g.Expect(pool.Status.IPAddresses).To(HaveValue(Equal(v1alpha1.IPAddressesSummary{Total: "65534", Free: "65531", Used: 3})))
		}).Should(Succeed())

		By("a released prefix is handed out again")
		first := newClaim(ns, claims[0], poolKind, "pool")
		deleteAndWait(first)
		Expect(boundAddress(createClaim(ns, "node-3", poolKind, "pool")).Spec.Address).To(Equal("fd00:10:0:1::"))
	})

	It("hands out IPv4 prefixes too", func() {
		createPool(ns, "pool", prefixSpec(24, "10.20.0.1", 26, "10.20.0.0/24"))
		for i, want := range []string{"10.20.0.64", "10.20.0.128", "10.20.0.192"} {
			address := boundAddress(createClaim(ns, fmt.Sprintf("c%d", i), poolKind, "pool"))
			Expect(address.Spec.Address).To(Equal(want))
			Expect(address.Spec.Prefix).To(Equal(ptr.To[int32](26)))
		}
	})

	It("counts a /32 of /64s exactly, past any int32", func() {
		createPool(ns, "pool", prefixSpec(32, "", 64, "2001:db8::/32"))
		Expect(boundAddress(createClaim(ns, "c", poolKind, "pool")).Spec.Address).To(Equal("2001:db8::"))
		pool := &v1alpha1.MetalVRFIPPool{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pool"}, pool)).To(Succeed())
			g.Expect(pool.Status.IPAddresses).To(HaveValue(Equal(v1alpha1.IPAddressesSummary{Total: "4294967296", Free: "4294967295", Used: 1})))
		}).Should(Succeed())
	})

	It("binds 100 claims created at once to 100 distinct, non-overlapping /64s, the lowest ones", func() {
		createPool(ns, "pool", prefixSpec(48, "fd00:11::1", 64, "fd00:11::/48"))
		holders := expectDistinctBound(createClaimsAtOnce(ns, "claim", 100, 16))
		for i := 1; i <= 100; i++ {
			Expect(holders).To(HaveKey(netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x11, 0, 0, byte(i >> 8), byte(i)}).String()))
		}
	})

	DescribeTable("refuses a bad prefix pool naming the field and the value",
		func(spec v1alpha1.MetalVRFIPPoolSpec, messages ...string) {
			err := k8s.Create(ctx, &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}, Spec: spec})
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid rejection, got %v", err)
			for _, m := range messages {
				Expect(err.Error()).To(ContainSubstring(m))
			}
		},
		Entry("longer than an IPv4 address", prefixSpec(24, "", 33, "10.0.0.0/24"),
			"spec.allocationPrefixLength: Invalid value: 33: must be between 1 and 32 for IPv4 prefixes"),
		Entry("shorter than the pool's subnet", prefixSpec(48, "", 40, "fd00::/48"),
			"spec.allocationPrefixLength: Invalid value: 40: is shorter than spec.prefix (48)"),
		Entry("no whole prefix in the addresses", prefixSpec(24, "", 28, "10.0.0.1-10.0.0.20"),
			"spec.addresses", "holds no whole /28"),
		Entry("beyond any family (schema)", prefixSpec(48, "", 129, "fd00::/48"),
			"spec.allocationPrefixLength", "129"),
	)

	It("refuses to change the length of a pool", func() {
		pool := createPool(ns, "pool", prefixSpec(48, "", 64, "fd00:12::/48"))
		err := k8s.Patch(ctx, pool, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"allocationPrefixLength":56}}`)))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid rejection, got %v", err)
		Expect(err.Error()).To(ContainSubstring("spec.allocationPrefixLength is immutable"))
	})
})
