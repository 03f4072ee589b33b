package adopt

import (
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// keepBusy changes claim node-0 of the namespace every few hundred
// milliseconds, as a pool whose claims are being written, until the
// returned function is called (once or more): an adoption of its pool
// waits meanwhile between the pause and serving.
func keepBusy(ns string) (stop func()) {
	const claim = "node-0"
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer GinkgoRecover()
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(300 * time.Millisecond):
			}
			c := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim}}
			patch := client.RawPatch("application/merge-patch+json",
				[]byte(`{"metadata":{"annotations":{"test.metal-vrf/busy":"`+strconv.Itoa(i)+`"}}}`))
			Expect(k8s.Patch(ctx, c, patch)).To(Succeed())
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// noCompanion asserts the pool has no companion (or one going).
func noCompanion(ns, name string) {
	GinkgoHelper()
	noCompanionOf(v1alpha1.InClusterIPPoolKind, ns, name)
}

// noCompanionOf asserts the in-cluster pool of the kind has no companion
// (or one going).
func noCompanionOf(kind, ns, name string) {
	GinkgoHelper()
	Eventually(func() bool {
		companion, ok := companionOf(kind, ns, name)
		return !ok || !companion.GetDeletionTimestamp().IsZero()
	}).Should(BeTrue(), "the companion of %s was not deleted", name)
}

// servedByInCluster asserts that the in-cluster provider alone serves the
// pool: a new claim is bound without any condition of ours or record, to
// an address none of taken holds, and the pool is not paused again.
func servedByInCluster(ns, pool, claim string, taken map[string]string) {
	GinkgoHelper()
	createClaim(ns, claim, pool)
	h := bound(ns, claim)
	Expect(taken).NotTo(HaveKey(h.Address), "claim %s got %s, held already", claim, h.Address)
	taken[h.Address] = claim
	untouched(ns, claim)
	records, err := env.AllocationRecords(ctx, ns)
	Expect(err).NotTo(HaveOccurred())
	Expect(records).NotTo(HaveKey(h.Address))
	Consistently(func() map[string]string {
		return inClusterPool(ns, pool).Annotations
	}, 2*settle).ShouldNot(Or(HaveKey(clusterv1.PausedAnnotation), HaveKey(v1alpha1.PausedForAdoptionAnnotation)))
}

// addressesOf maps each address held by a claim of the namespace to its claim.
func addressesOf(ns string, claims ...string) map[string]string {
	GinkgoHelper()
	taken := map[string]string{}
	for c, h := range holdings(ns, claims...) {
		Expect(taken).NotTo(HaveKey(h.Address), "%s and %s hold %s", taken[h.Address], c, h.Address)
		taken[h.Address] = c
	}
	return taken
}

// interruptBeforeServing adopts pool "nodes" of a new namespace, whose
// three claims the in-cluster provider bound, while a fourth claim waits;
// interrupt removes annotation from the pool before the companion serves.
// The adoption must be undone: no companion, none of left on the pool, the
// claims as the in-cluster provider bound them, and the waiting one bound
// by it to an address nobody else holds.
func interruptBeforeServing(name, gateway, addresses, annotation string, left ...string) {
	GinkgoHelper()
	ns, err := env.NewNamespace(ctx, name)
	Expect(err).NotTo(HaveOccurred())
	createInClusterPool(ns, "nodes", gateway, addresses)
	for _, c := range claims("node", 3) {
		createClaim(ns, c, "nodes")
	}
	before := holdings(ns, claims("node", 3)...)
	stop := keepBusy(ns)
	DeferCleanup(stop)

	annotateAdopt(ns, "nodes")
	pausedForAdoption(ns)
	createClaim(ns, "waiting", "nodes") // neither provider serves it now
	annotate(v1alpha1.InClusterIPPoolKind, ns, "nodes", map[string]*string{annotation: nil})

	Eventually(func() []string {
		return eventNotes(v1alpha1.InClusterIPPoolKind, "nodes", "AdoptionInterrupted")
	}).ShouldNot(BeEmpty())
	noCompanion(ns, "nodes")
	stop()
	for _, key := range left {
		Eventually(func() map[string]string { return inClusterPool(ns, "nodes").Annotations }).ShouldNot(HaveKey(key))
	}

	By("the claim that waited is bound by the in-cluster provider; the others keep theirs")
	Expect(holdings(ns, claims("node", 3)...)).To(Equal(before))
	taken := addressesOf(ns, append(claims("node", 3), "waiting")...)
	for _, c := range append(claims("node", 3), "waiting") {
		untouched(ns, c)
	}
	servedByInCluster(ns, "nodes", "after", taken)
	_, exists := companionOf(v1alpha1.InClusterIPPoolKind, ns, "nodes")
	Expect(exists).To(BeFalse())
}

var _ = Describe("An adoption interrupted", func() {
	It("by removing the adopt annotation before the companion serves is undone: the pool is the in-cluster provider's again, nothing handed out twice", func() {
		interruptBeforeServing("interrupt-annotation", "10.84.0.1", "10.84.0.10-10.84.0.30", v1alpha1.AdoptAnnotation,
			clusterv1.PausedAnnotation, v1alpha1.PausedForAdoptionAnnotation)
	})

	It("by unpausing the pool before the companion serves is undone, adopt annotation included, so the pool is not paused again", func() {
		interruptBeforeServing("interrupt-unpause", "10.85.0.1", "10.85.0.10-10.85.0.30", clusterv1.PausedAnnotation,
			v1alpha1.AdoptAnnotation, v1alpha1.PausedForAdoptionAnnotation)
	})

	It("by unpausing the pool after the companion served stops this provider serving it; the in-cluster provider's next address is none this provider handed out", func() {
		ns, err := env.NewNamespace(ctx, "interrupt-served")
		Expect(err).NotTo(HaveOccurred())
		createInClusterPool(ns, "nodes", "10.86.0.1", "10.86.0.10-10.86.0.30")
		for _, c := range claims("node", 2) {
			createClaim(ns, c, "nodes")
		}
		holdings(ns, claims("node", 2)...)
		annotateAdopt(ns, "nodes")
		companionServesOf(v1alpha1.InClusterIPPoolKind, ns, "nodes")
		createClaim(ns, "ours", "nodes")
		bound(ns, "ours")
		Eventually(func(g Gomega) {
			claim := &ipamv1.IPAddressClaim{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ours"}, claim)).To(Succeed())
			g.Expect(claim.Status.Conditions).NotTo(BeEmpty())
		}).Should(Succeed())
		taken := addressesOf(ns, append(claims("node", 2), "ours")...)

		annotate(v1alpha1.InClusterIPPoolKind, ns, "nodes", map[string]*string{clusterv1.PausedAnnotation: nil})
		Eventually(func() []string {
			return eventNotes(v1alpha1.InClusterIPPoolKind, "nodes", "AdoptionInterrupted")
		}).ShouldNot(BeEmpty())
		// The companion stays (it holds records); rolling back is by hand.
		_, exists := companionOf(v1alpha1.InClusterIPPoolKind, ns, "nodes")
		Expect(exists).To(BeTrue())
		createClaim(ns, "theirs", "nodes")
		h := bound(ns, "theirs")
		Expect(taken).NotTo(HaveKey(h.Address), "the in-cluster provider handed out %s again", h.Address)
		untouched(ns, "theirs")
	})
})

var _ = Describe("A claim deleted while its pool is paused for adoption", func() {
	It("is released by this provider as soon as the companion serves, not at the next resync", func() {
		ns, err := env.NewNamespace(ctx, "adopt-deleted")
		Expect(err).NotTo(HaveOccurred())
		createInClusterPool(ns, "nodes", "10.87.0.1", "10.87.0.10-10.87.0.30")
		for _, c := range claims("node", 3) {
			createClaim(ns, c, "nodes")
		}
		held := holdings(ns, claims("node", 3)...)
		stop := keepBusy(ns)
		DeferCleanup(stop)

		annotateAdopt(ns, "nodes")
		pausedForAdoption(ns)
		Expect(k8s.Delete(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "node-1"}})).To(Succeed())
		By("nobody releases it while the pool is paused and the companion does not serve")
		Consistently(func() error {
			return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: held["node-1"].Name}, &ipamv1.IPAddress{})
		}, time.Second).Should(Succeed())
		companion, exists := companionOf(v1alpha1.InClusterIPPoolKind, ns, "nodes")
		Expect(exists).To(BeTrue())
		Expect(companion.GetAnnotations()).To(HaveKey(clusterv1.PausedAnnotation), "the companion served already: the test came too late")

		stop()
		companionServesOf(v1alpha1.InClusterIPPoolKind, ns, "nodes")
		served := time.Now()
		By("the companion's serving start releases it")
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "node-1"}, &ipamv1.IPAddressClaim{}))
		}, 10*time.Second).Should(BeTrue(), "the deleted claim was not released once the companion served")
		GinkgoWriter.Printf("released %s after the companion served\n", time.Since(served))
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: held["node-1"].Name}, &ipamv1.IPAddress{}))
		}).Should(BeTrue())
		Eventually(func(g Gomega) {
			records, err := env.AllocationRecords(ctx, ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(records).NotTo(HaveKey(held["node-1"].Address))
		}).Should(Succeed())
		createClaim(ns, "reuse", "nodes")
		Expect(bound(ns, "reuse").Address).To(Equal(held["node-1"].Address), "the released address is the lowest free one")
	})
})

var _ = Describe("Serving an adopted pool waits until the pool is quiet", func() {
	It("does not serve while its claims change, nor while a claim has its IPAddress but not its status; then binds that claim to it", func() {
		ns, err := env.NewNamespace(ctx, "adopt-quiet")
		Expect(err).NotTo(HaveOccurred())
		createInClusterPool(ns, "nodes", "10.88.0.1", "10.88.0.10-10.88.0.30")
		for _, c := range claims("node", 2) {
			createClaim(ns, c, "nodes")
		}
		held := addressesOf(ns, claims("node", 2)...)

		By("a claim half-written: its IPAddress made, its status not yet (its Cluster is paused, so no manager finishes it)")
		Expect(k8s.Create(ctx, &clusterv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "paused"},
			Spec:       clusterv1.ClusterSpec{Paused: ptr.To(true)},
		})).To(Succeed())
		half := &ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "half"},
			Spec: ipamv1.IPAddressClaimSpec{ClusterName: "paused", PoolRef: ipamv1.IPPoolReference{
				APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.InClusterIPPoolKind, Name: "nodes",
			}},
		}
		Expect(k8s.Create(ctx, half)).To(Succeed())
		Expect(k8s.Create(ctx, &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "half"},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: "half"},
				PoolRef:  half.Spec.PoolRef,
				Address:  "10.88.0.29", Prefix: ptr.To[int32](24), Gateway: "10.88.0.1",
			},
		})).To(Succeed())
		held["10.88.0.29"] = "half"

		By("claims changing: the companion waits")
		stop := keepBusy(ns)
		DeferCleanup(stop)
		annotateAdopt(ns, "nodes")
		pausedForAdoption(ns)
		stillPaused := func() map[string]string {
			companion, _ := companionOf(v1alpha1.InClusterIPPoolKind, ns, "nodes")
			return companion.GetAnnotations()
		}
		Consistently(stillPaused, 3*settle).Should(HaveKey(clusterv1.PausedAnnotation))

		By("quiet, but a claim half-written: the companion still waits")
		stop()
		Consistently(stillPaused, 3*settle).Should(HaveKey(clusterv1.PausedAnnotation))

		By("the claim's status written, as its manager would: the companion serves, and the claim keeps its IPAddress")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(half), half)).To(Succeed())
		half.Status.AddressRef = ipamv1.IPAddressReference{Name: "half"}
		Expect(k8s.Status().Update(ctx, half)).To(Succeed())
		companionServesOf(v1alpha1.InClusterIPPoolKind, ns, "nodes")
		Eventually(func(g Gomega) {
			records, err := env.AllocationRecords(ctx, ns)
			g.Expect(err).NotTo(HaveOccurred())
			for address, claim := range held {
				g.Expect(records).To(HaveKeyWithValue(address, claim))
			}
		}).Should(Succeed())
		createClaim(ns, "new", "nodes")
		Expect(held).NotTo(HaveKey(bound(ns, "new").Address))
	})
})
