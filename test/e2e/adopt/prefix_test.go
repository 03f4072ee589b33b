package adopt

import (
	"net/netip"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	inclusterv1 "sigs.k8s.io/cluster-api-ipam-provider-in-cluster/api/v1alpha2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// prefixOf is the prefix a bound claim holds.
func prefixOf(h held) netip.Prefix {
	GinkgoHelper()
	return netip.PrefixFrom(netip.MustParseAddr(h.Address), int(h.Prefix))
}

// freshPrefixes checks that the claims of ns were bound by this provider
// to aligned /64s inside within that overlap none of taken (which it extends),
// with IPAddresses naming the in-cluster prefix pool and owned by it.
func freshPrefixes(ns, kind, name string, within netip.Prefix, taken map[netip.Prefix]string, names ...string) {
	GinkgoHelper()
	pool := inClusterPoolOf(kind, ns, name)
	for c, h := range holdings(ns, names...) {
		p := prefixOf(h)
		Expect(h.Prefix).To(BeEquivalentTo(64), "claim %s/%s", ns, c)
		Expect(p.Masked()).To(Equal(p), "claim %s/%s got %s, not aligned", ns, c, p)
		Expect(within.Contains(p.Addr())).To(BeTrue(), "claim %s/%s got %s, outside %s", ns, c, p, within)
		for q, holder := range taken {
			Expect(p.Overlaps(q)).To(BeFalse(), "claim %s/%s got %s, overlapping %s of %s", ns, c, p, q, holder)
		}
		taken[p] = ns + "/" + c
		claim := &ipamv1.IPAddressClaim{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: c}, claim)).To(Succeed())
		Expect(claim.Status.Conditions).NotTo(BeEmpty(), "claim %s/%s was not bound by this provider", ns, c)
		address := &ipamv1.IPAddress{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: h.Name}, address)).To(Succeed())
		Expect(address.Spec.PoolRef).To(Equal(ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: kind, Name: name}))
		Expect(metav1.IsControlledBy(address, claim)).To(BeTrue())
		Expect(address.OwnerReferences).To(ContainElement(HaveField("UID", pool.GetUID())))
	}
}

var _ = Describe("Adopting an InClusterPrefixPool", func() {
	It("keeps every bound claim's prefix, hands new claims fresh prefixes, releases through this provider, beside an InClusterIPPool of the same name", func() {
		const kind = v1alpha1.InClusterPrefixPoolKind
		ns, err := env.NewNamespace(ctx, "adopt-prefix")
		Expect(err).NotTo(HaveOccurred())
		within := netip.MustParsePrefix("fd00:83::/60") // 16 /64s
		excluded := netip.MustParsePrefix("fd00:83:0:2::/64")
		Expect(k8s.Create(ctx, &inclusterv1.InClusterPrefixPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodes"},
			Spec: inclusterv1.InClusterPrefixPoolSpec{
				Prefixes: []string{within.String()}, AllocationPrefixLength: 64,
				// Informational there: the in-cluster manager hands out
				// the /64 holding it, and that claim keeps it here.
				Gateway:          "fd00:83::1",
				ExcludedPrefixes: []string{excluded.String()},
			},
		})).To(Succeed())
		// An address pool of the same name: its companion is another pool.
		createInClusterPool(ns, "nodes", "10.83.0.1", "10.83.0.10-10.83.0.30")

		By("binding four prefix claims and an address claim with the in-cluster manager")
		before := claims("pods", 4)
		for _, c := range before {
			createClaimOf(ns, c, kind, "nodes")
		}
		createClaim(ns, "node-0", "nodes")
		adopted := holdings(ns, before...)
		address := bound(ns, "node-0")
		taken := map[netip.Prefix]string{excluded: "the excluded prefixes"}
		for c, h := range adopted {
			Expect(h.Prefix).To(BeEquivalentTo(64))
			p := prefixOf(h)
			for q, holder := range taken {
				Expect(p.Overlaps(q)).To(BeFalse(), "the in-cluster manager gave %s %s, overlapping %s of %s", c, p, q, holder)
			}
			taken[p] = ns + "/" + c
			untouched(ns, c)
		}
		Expect(taken).To(HaveKey(netip.MustParsePrefix("fd00:83::/64")), "the in-cluster manager hands out the gateway's /64")

		By("adopting both pools, the in-cluster manager still running")
		annotateAdoptOf(kind, ns, "nodes")
		annotateAdopt(ns, "nodes")
		companionServesOf(kind, ns, "nodes")
		companionServesOf(v1alpha1.InClusterIPPoolKind, ns, "nodes")
		companion, _ := companionOf(kind, ns, "nodes")
		Expect(companion.GetName()).To(Equal("inclusterprefix-nodes"))
		Expect(*companion.PoolSpec().AllocationPrefixLength).To(BeEquivalentTo(64))
		Expect(metav1.IsControlledBy(companion, inClusterPoolOf(kind, ns, "nodes"))).To(BeTrue())
		Expect(eventNotes(kind, "nodes", "AdoptionConflict")).To(BeEmpty())
		pool := inClusterPoolOf(kind, ns, "nodes")
		Expect(pool.GetAnnotations()).To(HaveKey(clusterv1.PausedAnnotation))
		Expect(pool.GetAnnotations()).To(HaveKey(v1alpha1.PausedForAdoptionAnnotation))

		By("every bound claim keeps its IPAddress: name, UID, address, prefix length and gateway")
		Expect(holdings(ns, before...)).To(Equal(adopted))
		Expect(bound(ns, "node-0")).To(Equal(address))
		for c, h := range adopted {
			ip := &ipamv1.IPAddress{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: h.Name}, ip)).To(Succeed())
			Expect(ip.Spec.Gateway).To(Equal("fd00:83::1"), "claim %s", c)
		}
		Eventually(func(g Gomega) {
			records, err := env.AllocationRecords(ctx, ns)
			g.Expect(err).NotTo(HaveOccurred())
			for c, h := range adopted {
				g.Expect(records).To(HaveKeyWithValue(h.Address, c), "the adopted prefix of %s has no record of ours", c)
			}
			g.Expect(records).To(HaveKeyWithValue(address.Address, "node-0"))
		}).Should(Succeed())

		By("new claims are served by this provider, with aligned /64s none held or excluded")
		after := claims("new", 3)
		for _, c := range after {
			createClaimOf(ns, c, kind, "nodes")
		}
		freshPrefixes(ns, kind, "nodes", within, taken, after...)

		By("deleting an adopted claim releases its prefix through this provider, and it is handed out again")
		freed := adopted["pods-1"]
		Expect(k8s.Delete(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods-1"}})).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pods-1"}, &ipamv1.IPAddressClaim{}))).To(BeTrue())
			records, err := env.AllocationRecords(ctx, ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(records).NotTo(HaveKey(freed.Address))
		}).Should(Succeed())
		createClaimOf(ns, "reuse", kind, "nodes")
		Expect(prefixOf(bound(ns, "reuse"))).To(Equal(prefixOf(freed)), "the lowest free prefix is the one released")
	})

	It("adopts a GlobalInClusterPrefixPool with claims of two namespaces", func() {
		const kind = v1alpha1.GlobalInClusterPrefixPoolKind
		nsA, err := env.NewNamespace(ctx, "global-prefix-a")
		Expect(err).NotTo(HaveOccurred())
		nsB, err := env.NewNamespace(ctx, "global-prefix-b")
		Expect(err).NotTo(HaveOccurred())
		name := "pods-" + nsA // cluster-scoped: unique per run
		within := netip.MustParsePrefix("fd00:84::/60")
		Expect(k8s.Create(ctx, &inclusterv1.GlobalInClusterPrefixPool{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       inclusterv1.InClusterPrefixPoolSpec{Prefixes: []string{within.String()}, AllocationPrefixLength: 64},
		})).To(Succeed())
		for ns, c := range map[string]string{nsA: "a-0", nsB: "b-0"} {
			createClaimOf(ns, c, kind, name)
		}
		adoptedA, adoptedB := holdings(nsA, "a-0"), holdings(nsB, "b-0")
		taken := map[netip.Prefix]string{prefixOf(adoptedA["a-0"]): nsA + "/a-0", prefixOf(adoptedB["b-0"]): nsB + "/b-0"}
		Expect(taken).To(HaveLen(2))

		annotateAdoptOf(kind, "", name)
		companionServesOf(kind, "", name)
		companion, _ := companionOf(kind, "", name)
		Expect(companion).To(BeAssignableToTypeOf(&v1alpha1.GlobalMetalVRFIPPool{}))

		Expect(holdings(nsA, "a-0")).To(Equal(adoptedA))
		Expect(holdings(nsB, "b-0")).To(Equal(adoptedB))
		for ns, c := range map[string]string{nsA: "new-a", nsB: "new-b"} {
			createClaimOf(ns, c, kind, name)
		}
		freshPrefixes(nsA, kind, name, within, taken, "new-a")
		freshPrefixes(nsB, kind, name, within, taken, "new-b")
	})

	It("interrupted before the companion serves is undone: the pool is the in-cluster provider's again, no prefix handed out twice", func() {
		const kind = v1alpha1.InClusterPrefixPoolKind
		ns, err := env.NewNamespace(ctx, "interrupt-prefix")
		Expect(err).NotTo(HaveOccurred())
		Expect(k8s.Create(ctx, &inclusterv1.InClusterPrefixPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodes"},
			Spec:       inclusterv1.InClusterPrefixPoolSpec{Prefixes: []string{"fd00:86::/60"}, AllocationPrefixLength: 64},
		})).To(Succeed())
		for _, c := range claims("node", 3) {
			createClaimOf(ns, c, kind, "nodes")
		}
		before := holdings(ns, claims("node", 3)...)
		stop := keepBusy(ns) // holds the adoption between the pause and serving
		DeferCleanup(stop)

		annotateAdoptOf(kind, ns, "nodes")
		pausedForAdoptionOf(kind, ns)
		createClaimOf(ns, "waiting", kind, "nodes") // neither provider serves it now
		annotate(kind, ns, "nodes", map[string]*string{v1alpha1.AdoptAnnotation: nil})
		Eventually(func() []string { return eventNotes(kind, "nodes", "AdoptionInterrupted") }).ShouldNot(BeEmpty())
		noCompanionOf(kind, ns, "nodes")
		stop()
		Eventually(func() map[string]string { return inClusterPoolOf(kind, ns, "nodes").GetAnnotations() }).
			ShouldNot(Or(HaveKey(clusterv1.PausedAnnotation), HaveKey(v1alpha1.PausedForAdoptionAnnotation)))

		By("the claim that waited and a new one are bound by the in-cluster provider; the others keep theirs")
		Expect(holdings(ns, claims("node", 3)...)).To(Equal(before))
		createClaimOf(ns, "after", kind, "nodes")
		taken := map[netip.Prefix]string{}
		for c, h := range holdings(ns, append(claims("node", 3), "waiting", "after")...) {
			for q, holder := range taken {
				Expect(prefixOf(h).Overlaps(q)).To(BeFalse(), "%s and %s hold %s", c, holder, q)
			}
			taken[prefixOf(h)] = c
			untouched(ns, c)
		}
		records, err := env.AllocationRecords(ctx, ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(records).To(BeEmpty())
	})

	It("refuses a prefix pool whose prefixes overlap, leaving it to the in-cluster provider", func() {
		const kind = v1alpha1.InClusterPrefixPoolKind
		ns, err := env.NewNamespace(ctx, "adopt-prefix-bad")
		Expect(err).NotTo(HaveOccurred())
		// The in-cluster provider takes overlapping prefixes (it unions
		// them); this provider's subnets must not overlap.
		Expect(k8s.Create(ctx, &inclusterv1.InClusterPrefixPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"},
			Spec:       inclusterv1.InClusterPrefixPoolSpec{Prefixes: []string{"fd00:85::/56", "fd00:85::/60"}, AllocationPrefixLength: 64},
		})).To(Succeed())
		createClaimOf(ns, "bad-0", kind, "bad")
		first := bound(ns, "bad-0")

		annotateAdoptOf(kind, ns, "bad")
		refusal := adoptionRefusal(ns, "bad")
		Expect(refusal).To(ContainSubstring("fd00:85::/60"))

		By("nothing half-done: no companion, the pool not paused, its claims still the in-cluster provider's")
		_, ok := companionOf(kind, ns, "bad")
		Expect(ok).To(BeFalse())
		Consistently(func() map[string]string {
			return inClusterPoolOf(kind, ns, "bad").GetAnnotations()
		}, 2*settle).ShouldNot(HaveKey(clusterv1.PausedAnnotation))
		createClaimOf(ns, "bad-1", kind, "bad")
		Expect(prefixOf(bound(ns, "bad-1")).Overlaps(prefixOf(first))).To(BeFalse())
		untouched(ns, "bad-0")
		untouched(ns, "bad-1")
		records, err := env.AllocationRecords(ctx, ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(records).To(BeEmpty())
	})
})
