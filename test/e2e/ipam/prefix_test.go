package ipam

import (
	"fmt"
	"net/netip"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"go4.org/netipx"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cappv1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
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

	It("serves claims of every namespace from a global prefix pool, distinct prefixes", func() {
		global := createGlobalPool(ns+"-prefixes", prefixSpec(56, "", 64, "fd00:13::/56"))
		other := newNamespace()
		var claims []*ipamv1.IPAddressClaim
		for i, claimNS := range []string{ns, other, ns, other} {
			claims = append(claims, createClaim(claimNS, fmt.Sprintf("node-%d", i), v1alpha1.GlobalMetalVRFIPPoolKind, global.Name))
		}
		got := map[string]bool{}
		for _, claim := range claims {
			address := boundAddress(claim)
			Expect(address.Spec.Prefix).To(Equal(ptr.To[int32](64)))
			got[address.Spec.Address] = true
		}
		Expect(got).To(Equal(map[string]bool{"fd00:13::": true, "fd00:13:0:1::": true, "fd00:13:0:2::": true, "fd00:13:0:3::": true}))
		for _, claim := range claims {
			deleteAndWait(claim)
		}
		deleteAndWait(global)
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

var _ = Describe("Prefix pools fed by sources", func() {
	var ns string
	BeforeEach(func() {
		useNewVRF()
		ns = newNamespace()
	})

	It("never hands out overlapping space from an address pool and a prefix pool of one VRF, claimed at once", func() {
		createCredentials(ns, demoToken)
		addrSpec := vrfSpec(v1alpha1.VRFScopeIPRanges)
		addrSpec.Prefix = ptr.To[int32](22)
		addresses := createPool(ns, "addresses", addrSpec)
		pfxSpec := vrfSpec(v1alpha1.VRFScopeIPRanges)
		pfxSpec.Prefix = ptr.To[int32](22)
		pfxSpec.AllocationPrefixLength = ptr.To[int32](30)
		prefixes := createPool(ns, "prefixes", pfxSpec)
		for _, p := range []v1alpha1.Pool{addresses, prefixes} {
			expectPool(p, func(g Gomega, p v1alpha1.Pool) {
				haveCondition(g, p, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReadyReason)
			})
		}

		// The VRF's ranges, 10.60.0.0/22 and 10.61.0.0/24: both pools
		// start at 10.60.0.0, so they contend for the same space.
		var claims []*ipamv1.IPAddressClaim
		for i := range 30 {
			claims = append(claims,
				newClaim(ns, fmt.Sprintf("address-%d", i), poolKind, addresses.Name),
				newClaim(ns, fmt.Sprintf("prefix-%d", i), poolKind, prefixes.Name))
		}
		createAllAtOnce(claims)

		var spans []netipx.IPRange
		owners := map[netipx.IPRange]string{}
		for _, claim := range claims {
			address := boundAddress(claim)
			ip := netip.MustParseAddr(address.Spec.Address)
			span := netipx.IPRangeFrom(ip, ip)
			if strings.HasPrefix(claim.Name, "prefix-") {
				Expect(address.Spec.Prefix).To(Equal(ptr.To[int32](30)))
				span = netipx.RangeOfPrefix(netip.PrefixFrom(ip, 30))
				Expect(span.Contains(netip.MustParseAddr("10.60.1.1"))).To(BeFalse(), "%s holds a Metal Gateway", address.Spec.Address)
			}
			spans = append(spans, span)
			owners[span] = claim.Name
		}
		if i, j, overlap := cidr.Overlap(spans); overlap {
			Fail(fmt.Sprintf("%s (%s) and %s (%s) overlap", spans[i], owners[spans[i]], spans[j], owners[spans[j]]))
		}
	})

	It("carves a PacketCluster network into prefixes", func() {
		cluster := &cappv1.PacketCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"},
			Spec: cappv1.PacketClusterSpec{ProjectID: demoProject, Networks: []cappv1.NetworkSpec{
				{Name: "pods", IPAddresses: []string{"10.90.0.0/24"}, Assignment: cappv1.AssignmentClusterAPI},
			}},
		}
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		pool := createPool(ns, "pods", v1alpha1.MetalVRFIPPoolSpec{
			NetworkRef:             &v1alpha1.NetworkReference{Name: "demo", Network: "pods"},
			AllocationPrefixLength: ptr.To[int32](28),
		})
		expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
			haveCondition(g, p, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReadyReason)
			g.Expect(p.PoolStatus().IPAddresses).To(HaveValue(HaveField("Total", "16")))
		})
		for i, want := range []string{"10.90.0.0", "10.90.0.16"} {
			address := boundAddress(createClaim(ns, fmt.Sprintf("node-%d", i), poolKind, pool.Name))
			Expect(address.Spec.Address).To(Equal(want))
			Expect(address.Spec.Prefix).To(Equal(ptr.To[int32](28)))
		}
	})
})
