package adopt

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

var _ = Describe("Adopting a GlobalInClusterIPPool", func() {
	It("keeps the IPAddresses of claims of two namespaces, serves new claims of both from what is free through a GlobalMetalVRFIPPool allocating here, and releases through this provider", func() {
		const kind = v1alpha1.GlobalInClusterIPPoolKind
		nsA, err := env.NewNamespace(ctx, "global-a")
		Expect(err).NotTo(HaveOccurred())
		nsB, err := env.NewNamespace(ctx, "global-b")
		Expect(err).NotTo(HaveOccurred())
		name := "shared-" + nsA // cluster-scoped: unique per run
		createGlobalInClusterPool(name, "10.90.0.1", "10.90.0.10-10.90.0.30")

		By("binding claims of two namespaces with the in-cluster manager")
		for _, c := range claims("a", 3) {
			createClaimOf(nsA, c, kind, name)
		}
		for _, c := range claims("b", 2) {
			createClaimOf(nsB, c, kind, name)
		}
		adoptedA, adoptedB := holdings(nsA, claims("a", 3)...), holdings(nsB, claims("b", 2)...)
		taken := map[string]string{}
		for c, h := range adoptedA {
			taken[h.Address] = nsA + "/" + c
			untouched(nsA, c)
		}
		for c, h := range adoptedB {
			Expect(taken).NotTo(HaveKey(h.Address), "the in-cluster manager handed %s out twice", h.Address)
			taken[h.Address] = nsB + "/" + c
			untouched(nsB, c)
		}

		By("adopting the pool, the in-cluster manager still running")
		annotateAdoptOf(kind, "", name)
		companionServesOf(kind, "", name)
		pool := inClusterPoolOf(kind, "", name)
		Expect(pool.GetAnnotations()).To(HaveKey(clusterv1.PausedAnnotation))
		Expect(pool.GetAnnotations()).To(HaveKey(v1alpha1.PausedForAdoptionAnnotation))
		companion, _ := companionOf(kind, "", name)
		Expect(companion).To(BeAssignableToTypeOf(&v1alpha1.GlobalMetalVRFIPPool{}))
		Expect(metav1.IsControlledBy(companion, pool)).To(BeTrue())
		kubeSystem := &corev1.Namespace{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: "kube-system"}, kubeSystem)).To(Succeed())
		Expect(companion.GetAnnotations()).To(HaveKeyWithValue(v1alpha1.AllocatingClusterAnnotation, string(kubeSystem.UID)),
			"the companion allocates in this management cluster")
		Expect(eventNotes(kind, name, "Adopted")).NotTo(BeEmpty())

		By("every bound claim of both namespaces keeps its IPAddress (name, UID, address) and has a record of ours")
		Expect(holdings(nsA, claims("a", 3)...)).To(Equal(adoptedA))
		Expect(holdings(nsB, claims("b", 2)...)).To(Equal(adoptedB))
		for ns, adopted := range map[string]map[string]held{nsA: adoptedA, nsB: adoptedB} {
			Eventually(func(g Gomega) {
				records, err := env.AllocationRecords(ctx, ns)
				g.Expect(err).NotTo(HaveOccurred())
				for c, h := range adopted {
					g.Expect(records).To(HaveKeyWithValue(h.Address, c), "the adopted address of %s/%s has no record of ours", ns, c)
				}
			}).Should(Succeed())
		}

		By("new claims of both namespaces are served by this provider, never with an address held")
		for ns, prefix := range map[string]string{nsA: "new-a", nsB: "new-b"} {
			for _, c := range claims(prefix, 2) {
				createClaimOf(ns, c, kind, name)
			}
		}
		for ns, prefix := range map[string]string{nsA: "new-a", nsB: "new-b"} {
			for c, h := range holdings(ns, claims(prefix, 2)...) {
				Expect(taken).NotTo(HaveKey(h.Address), "claim %s/%s got %s", ns, c, h.Address)
				taken[h.Address] = ns + "/" + c
				claim := &ipamv1.IPAddressClaim{}
				Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: c}, claim)).To(Succeed())
				Expect(claim.Status.Conditions).NotTo(BeEmpty(), "claim %s/%s was not bound by this provider", ns, c)
				address := &ipamv1.IPAddress{}
				Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: h.Name}, address)).To(Succeed())
				Expect(address.Spec.PoolRef.Kind).To(Equal(kind))
				Expect(address.Spec.PoolRef.Name).To(Equal(name))
				Expect(metav1.IsControlledBy(address, claim)).To(BeTrue())
				Expect(address.OwnerReferences).To(ContainElement(HaveField("UID", pool.GetUID())))
				Expect(address.Spec.Gateway).To(Equal("10.90.0.1"))
			}
		}

		By("deleting an adopted claim of the second namespace releases its address through this provider, and it is handed out again")
		freed := adoptedB["b-0"]
		Expect(k8s.Delete(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "b-0"}})).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "b-0"}, &ipamv1.IPAddressClaim{}))
		}).Should(BeTrue())
		Eventually(func(g Gomega) {
			records, err := env.AllocationRecords(ctx, nsB)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(records).NotTo(HaveKey(freed.Address))
		}).Should(Succeed())
		createClaimOf(nsA, "reuse", kind, name)
		Expect(bound(nsA, "reuse").Address).To(Equal(freed.Address), "the lowest free address is the one released")
	})
})
