package adopt

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	inclusterv1 "sigs.k8s.io/cluster-api-ipam-provider-in-cluster/api/v1alpha2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// held is what a bound claim holds: its IPAddress's name, UID, address
// and prefix length.
type held struct {
	Name    string
	UID     types.UID
	Address string
	Prefix  int32
}

func createInClusterPool(ns, name, gateway string, addresses ...string) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &inclusterv1.InClusterIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       inclusterv1.InClusterIPPoolSpec{Addresses: addresses, Prefix: 24, Gateway: gateway},
	})).To(Succeed())
}

func createGlobalInClusterPool(name, gateway string, addresses ...string) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &inclusterv1.GlobalInClusterIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       inclusterv1.InClusterIPPoolSpec{Addresses: addresses, Prefix: 24, Gateway: gateway},
	})).To(Succeed())
}

func createClaim(ns, name, pool string) {
	GinkgoHelper()
	createClaimOf(ns, name, v1alpha1.InClusterIPPoolKind, pool)
}

// createClaimOf creates a claim of an in-cluster pool of the given kind.
func createClaimOf(ns, name, kind, pool string) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
			APIGroup: v1alpha1.GroupVersion.Group, Kind: kind, Name: pool,
		}},
	})).To(Succeed())
}

// bound waits until the claim is bound and returns what it holds.
func bound(ns, name string) held {
	GinkgoHelper()
	var h held
	Eventually(func(g Gomega) {
		claim := &ipamv1.IPAddressClaim{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, claim)).To(Succeed())
		g.Expect(claim.Status.AddressRef.Name).NotTo(BeEmpty())
		address := &ipamv1.IPAddress{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: claim.Status.AddressRef.Name}, address)).To(Succeed())
		h = held{Name: address.Name, UID: address.UID, Address: address.Spec.Address, Prefix: ptr.Deref(address.Spec.Prefix, -1)}
	}).Should(Succeed())
	return h
}

func holdings(ns string, claims ...string) map[string]held {
	GinkgoHelper()
	out := map[string]held{}
	for _, c := range claims {
		out[c] = bound(ns, c)
	}
	return out
}

func inClusterPool(ns, name string) *inclusterv1.InClusterIPPool {
	GinkgoHelper()
	return inClusterPoolOf(v1alpha1.InClusterIPPoolKind, ns, name).(*inclusterv1.InClusterIPPool)
}

// inClusterPoolOf reads an in-cluster pool of the given kind (ns is
// ignored for a cluster-scoped one).
func inClusterPoolOf(kind, ns, name string) client.Object {
	GinkgoHelper()
	var pool client.Object
	switch kind {
	case v1alpha1.InClusterIPPoolKind:
		pool = &inclusterv1.InClusterIPPool{}
	case v1alpha1.GlobalInClusterIPPoolKind:
		pool, ns = &inclusterv1.GlobalInClusterIPPool{}, ""
	case v1alpha1.InClusterPrefixPoolKind:
		pool = &inclusterv1.InClusterPrefixPool{}
	case v1alpha1.GlobalInClusterPrefixPoolKind:
		pool, ns = &inclusterv1.GlobalInClusterPrefixPool{}, ""
	}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pool)).To(Succeed())
	return pool
}

// annotate sets (value non-nil) or removes (nil) annotations of an
// in-cluster pool, as a user with kubectl annotate.
func annotate(kind, ns, name string, changes map[string]*string) {
	GinkgoHelper()
	pool := inClusterPoolOf(kind, ns, name)
	before := pool.DeepCopyObject().(client.Object)
	a := pool.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	for k, v := range changes {
		if v == nil {
			delete(a, k)
		} else {
			a[k] = *v
		}
	}
	pool.SetAnnotations(a)
	Expect(k8s.Patch(ctx, pool, client.MergeFrom(before))).To(Succeed())
}

func annotateAdopt(ns, name string) {
	GinkgoHelper()
	annotateAdoptOf(v1alpha1.InClusterIPPoolKind, ns, name)
}

func annotateAdoptOf(kind, ns, name string) {
	GinkgoHelper()
	annotate(kind, ns, name, map[string]*string{v1alpha1.AdoptAnnotation: ptr.To("true")})
}

// companionOf reads the companion of an in-cluster pool; ok is false when
// there is none.
func companionOf(kind, ns, name string) (v1alpha1.Pool, bool) {
	GinkgoHelper()
	var companion v1alpha1.Pool = &v1alpha1.MetalVRFIPPool{}
	if kind == v1alpha1.GlobalInClusterIPPoolKind || kind == v1alpha1.GlobalInClusterPrefixPoolKind {
		companion, ns = &v1alpha1.GlobalMetalVRFIPPool{}, ""
	}
	prefix := v1alpha1.AdoptedPoolPrefix
	if kind == v1alpha1.InClusterPrefixPoolKind || kind == v1alpha1.GlobalInClusterPrefixPoolKind {
		prefix = v1alpha1.AdoptedPrefixPoolPrefix
	}
	err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: prefix + name}, companion)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	Expect(err).NotTo(HaveOccurred())
	return companion, true
}

// companionServesOf waits until the pool's companion exists and is unpaused.
func companionServesOf(kind, ns, name string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		companion, ok := companionOf(kind, ns, name)
		g.Expect(ok).To(BeTrue(), "no companion")
		g.Expect(companion.GetAnnotations()).NotTo(HaveKey(clusterv1.PausedAnnotation))
	}).Should(Succeed())
}

// pausedForAdoption waits until this provider paused the InClusterIPPool
// nodes of the namespace, its companion not serving yet.
func pausedForAdoption(ns string) {
	GinkgoHelper()
	pausedForAdoptionOf(v1alpha1.InClusterIPPoolKind, ns)
}

// pausedForAdoptionOf waits until this provider paused the in-cluster pool
// nodes of the kind and namespace, its companion not serving yet.
func pausedForAdoptionOf(kind, ns string) {
	GinkgoHelper()
	const name = "nodes"
	var companion v1alpha1.Pool
	Eventually(func(g Gomega) {
		g.Expect(inClusterPoolOf(kind, ns, name).GetAnnotations()).To(HaveKey(v1alpha1.PausedForAdoptionAnnotation))
		var ok bool
		companion, ok = companionOf(kind, ns, name)
		g.Expect(ok).To(BeTrue(), "no companion")
	}).Should(Succeed())
	Expect(companion.GetAnnotations()).To(HaveKey(clusterv1.PausedAnnotation), "the companion serves already: the test came too late")
}

// eventNotes returns the notes of the events of the given reason about
// the object of that kind and name, in every namespace (a cluster-scoped
// object's land in "default").
func eventNotes(kind, name, reason string) []string {
	GinkgoHelper()
	var list eventsv1.EventList
	Expect(k8s.List(ctx, &list)).To(Succeed())
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason {
			notes = append(notes, e.Note)
		}
	}
	return notes
}

// claims names n claims prefix-0..n-1.
func claims(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return names
}

// untouched asserts that this provider wrote nothing on the claim: no
// condition (the in-cluster provider writes none).
func untouched(ns, name string) {
	GinkgoHelper()
	claim := &ipamv1.IPAddressClaim{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, claim)).To(Succeed())
	Expect(claim.Status.Conditions).To(BeEmpty(), "claim %s has conditions, which only this provider writes", name)
}

var _ = Describe("Adopting an InClusterIPPool", func() {
	It("keeps every bound claim's IPAddress, serves new claims from what is free, releases through this provider, and leaves other in-cluster pools alone", func() {
		ns, err := env.NewNamespace(ctx, "adopt")
		Expect(err).NotTo(HaveOccurred())
		createInClusterPool(ns, "nodes", "10.80.0.1", "10.80.0.10-10.80.0.30")
		createInClusterPool(ns, "other", "10.81.0.1", "10.81.0.10-10.81.0.30")

		By("binding five claims with the in-cluster manager")
		before := claims("node", 5)
		for _, c := range before {
			createClaim(ns, c, "nodes")
		}
		adopted := holdings(ns, before...)
		for _, c := range claims("other", 2) {
			createClaim(ns, c, "other")
		}
		others := holdings(ns, claims("other", 2)...)
		for _, c := range append(before, claims("other", 2)...) {
			untouched(ns, c)
		}

		By("adopting the pool, the in-cluster manager still running")
		annotateAdopt(ns, "nodes")
		companionServesOf(v1alpha1.InClusterIPPoolKind, ns, "nodes")
		pool := inClusterPool(ns, "nodes")
		Expect(pool.Annotations).To(HaveKey(clusterv1.PausedAnnotation))
		Expect(pool.Annotations).To(HaveKey(v1alpha1.PausedForAdoptionAnnotation))

		By("every bound claim keeps its IPAddress: name, UID and address")
		Expect(holdings(ns, before...)).To(Equal(adopted))
		Eventually(func(g Gomega) {
			records, err := env.AllocationRecords(ctx, ns)
			g.Expect(err).NotTo(HaveOccurred())
			for c, h := range adopted {
				g.Expect(records).To(HaveKeyWithValue(h.Address, c), "the adopted address of %s has no record of ours", c)
			}
		}).Should(Succeed())

		By("new claims are served by this provider, never with an adopted address")
		taken := map[string]string{}
		for c, h := range adopted {
			taken[h.Address] = c
		}
		after := claims("new", 3)
		for _, c := range after {
			createClaim(ns, c, "nodes")
		}
		for c, h := range holdings(ns, after...) {
			Expect(taken).NotTo(HaveKey(h.Address), "claim %s got %s", c, h.Address)
			taken[h.Address] = c
			claim := &ipamv1.IPAddressClaim{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: c}, claim)).To(Succeed())
			Expect(claim.Status.Conditions).NotTo(BeEmpty(), "claim %s was not bound by this provider", c)
			address := &ipamv1.IPAddress{}
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: h.Name}, address)).To(Succeed())
			Expect(address.Spec.PoolRef.Kind).To(Equal(v1alpha1.InClusterIPPoolKind))
			Expect(address.Spec.PoolRef.Name).To(Equal("nodes"))
			Expect(metav1.IsControlledBy(address, claim)).To(BeTrue())
			Expect(address.OwnerReferences).To(ContainElement(HaveField("UID", pool.UID)))
			Expect(address.Spec.Gateway).To(Equal("10.80.0.1"))
			Expect(*address.Spec.Prefix).To(BeEquivalentTo(24))
		}

		By("deleting an adopted claim releases its address through this provider, and it is handed out again")
		freed := adopted["node-0"]
		Expect(k8s.Delete(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "node-0"}})).To(Succeed())
		Eventually(func() bool {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "node-0"}, &ipamv1.IPAddressClaim{})
			return apierrors.IsNotFound(err)
		}).Should(BeTrue())
		Eventually(func(g Gomega) {
			records, err := env.AllocationRecords(ctx, ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(records).NotTo(HaveKey(freed.Address))
		}).Should(Succeed())
		createClaim(ns, "reuse", "nodes")
		Expect(bound(ns, "reuse").Address).To(Equal(freed.Address), "the lowest free address is the one released")

		By("the unadopted pool stays the in-cluster provider's")
		Expect(holdings(ns, claims("other", 2)...)).To(Equal(others))
		createClaim(ns, "other-2", "other")
		h := bound(ns, "other-2")
		for _, c := range claims("other", 3) {
			untouched(ns, c)
		}
		records, err := env.AllocationRecords(ctx, ns)
		Expect(err).NotTo(HaveOccurred())
		for _, o := range append([]held{h}, others["other-0"], others["other-1"]) {
			Expect(records).NotTo(HaveKey(o.Address))
		}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: v1alpha1.AdoptedPoolPrefix + "other"}, &v1alpha1.MetalVRFIPPool{})).
			To(Satisfy(apierrors.IsNotFound))
	})

	It("refuses a pool whose spec this provider refuses, leaving it to the in-cluster provider", func() {
		ns, err := env.NewNamespace(ctx, "adopt-bad")
		Expect(err).NotTo(HaveOccurred())
		// The in-cluster provider takes a gateway outside the subnet; this
		// provider refuses it.
		createInClusterPool(ns, "bad", "10.99.0.1", "10.82.0.10-10.82.0.30")
		createClaim(ns, "bad-0", "bad")
		first := bound(ns, "bad-0")

		annotateAdopt(ns, "bad")
		refusal := adoptionRefusal(ns, "bad")
		Expect(refusal).To(ContainSubstring("10.99.0.1"))

		By("nothing half-done: no companion, the pool not paused, its claims still the in-cluster provider's")
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: v1alpha1.AdoptedPoolPrefix + "bad"}, &v1alpha1.MetalVRFIPPool{})).
			To(Satisfy(apierrors.IsNotFound))
		Consistently(func() map[string]string {
			return inClusterPool(ns, "bad").Annotations
		}, 2*settle).ShouldNot(HaveKey(clusterv1.PausedAnnotation))
		createClaim(ns, "bad-1", "bad")
		second := bound(ns, "bad-1")
		Expect(second.Address).NotTo(Equal(first.Address))
		untouched(ns, "bad-0")
		untouched(ns, "bad-1")
		records, err := env.AllocationRecords(ctx, ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(records).To(BeEmpty())
	})
})

// adoptionRefusal waits for the AdoptionRefused event of the pool name in
// ns and returns its note.
func adoptionRefusal(ns, name string) string {
	GinkgoHelper()
	var refusal string
	Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		for _, e := range list.Items {
			if e.Regarding.Name == name && e.Reason == "AdoptionRefused" {
				refusal = e.Note
			}
		}
		g.Expect(refusal).NotTo(BeEmpty())
	}).Should(Succeed())
	GinkgoWriter.Println("refusal:", refusal)
	return refusal
}
