package move

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// TestMoveGlobalPoolNamespaceByNamespace moves two namespaces whose
// Clusters' claims share a GlobalMetalVRFIPPool, one after the other. move
// copies the pool to the target and leaves it on the source, so two copies
// exist: only the management cluster the pool names allocates; the other
// copy re-binds the claims that moved but serves no new one until the pool
// is handed over, which the source allows only once no namespace there holds
// its addresses.
func TestMoveGlobalPoolNamespaceByNamespace(t *testing.T) {
	g := newG(t)
	src, dst := source.Client, target.Client
	const kind, pool = v1alpha1.GlobalMetalVRFIPPoolKind, "shared"
	g.Expect(src.Create(ctx, &v1alpha1.GlobalMetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: pool},
		Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.40.0.2-10.40.0.40"}, Prefix: ptr.To[int32](24), Gateway: "10.40.0.1"},
	})).To(Succeed())
	sourcePool, targetPool := &v1alpha1.GlobalMetalVRFIPPool{}, &v1alpha1.GlobalMetalVRFIPPool{}
	// annotation reads an annotation of the pool's copy on k8s.
	annotation := func(k8s client.Client, p *v1alpha1.GlobalMetalVRFIPPool, name string) func(Gomega) string {
		return func(g Gomega) string {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Name: pool}, p)).To(Succeed())
			return p.Annotations[name]
		}
	}
	// annotate sets (or, with value nil, removes) an annotation of the
	// pool's copy on k8s.
	annotate := func(k8s client.Client, p *v1alpha1.GlobalMetalVRFIPPool, name string, value *string) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: pool}, p)).To(Succeed())
		base := p.DeepCopy()
		if value == nil {
			delete(p.Annotations, name)
		} else {
			metav1.SetMetaDataAnnotation(&p.ObjectMeta, name, *value)
		}
		g.Expect(k8s.Patch(ctx, p, client.MergeFrom(base))).To(Succeed())
	}

	// Two namespaces, each with a Cluster and five bound claims.
	namespaces := map[string]string{}
	// before maps each namespace to its claims' addresses on the source.
	before := map[string]map[string]string{}
	for _, name := range []string{"a2", "b2"} {
		ns, err := source.NewNamespace(ctx, "move-"+name)
		g.Expect(err).NotTo(HaveOccurred())
		namespaces[name] = ns
		cluster := createCluster(g, src, ns, name)
		for i := range 5 {
			createClaim(g, src, cluster, fmt.Sprintf("claim-%d", i), kind, pool, nil)
		}
	}
	nsA, nsB := namespaces["a2"], namespaces["b2"]
	for _, ns := range namespaces {
		before[ns] = waitBound(g, src, ns, 5)
	}
	sourceIdentity := ""
	g.Eventually(func(g Gomega) string {
		sourceIdentity = annotation(src, sourcePool, v1alpha1.AllocatingClusterAnnotation)(g)
		return sourceIdentity
	}).ShouldNot(BeEmpty(), "the source stamps the pool as its own")

	t.Log("moving a2: the target re-binds its claims but serves no new one")
	move(t, g, nsA)
	g.Eventually(func(g Gomega) map[string]string { return boundAddresses(g, dst, nsA) }).Should(Equal(before[nsA]))
	g.Expect(annotation(dst, targetPool, v1alpha1.AllocatingClusterAnnotation)(g)).To(Equal(sourceIdentity), "move copied the pool with its stamp")
	clusterA := getCluster(g, dst, nsA, "a2")
	createClaim(g, dst, clusterA, "new", kind, pool, nil)
	// waitsForSource checks that the claim new of nsA waits on the target.
	waitsForSource := func() {
		g.Eventually(func(g Gomega) {
			ready := readyCondition(g, dst, nsA, "new")
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(ipamv1.IPAddressClaimReadyPoolNotReadyReason))
			g.Expect(ready.Message).To(ContainSubstring("allocates in management cluster"))
		}).Should(Succeed(), "the target's new claim waits for the pool")
		g.Consistently(func(g Gomega) map[string]string { return boundAddresses(g, dst, nsA) }).ShouldNot(HaveKey("new"))
	}
	waitsForSource()

	t.Log("the source releases what a2 held there, and keeps serving b2")
	expectNoAddresses(g, src, nsA)
	deleteNamespace(g, src, nsA)
	clusterB := getCluster(g, src, nsB, "b2")
	heldByA := slices.Collect(maps.Values(before[nsA]))
	// Kubernetes' garbage collector has had the moved objects' owner
	// references to rewrite; a manager that starts now seeds the pool's
	// domain from the records and objects left, and must still keep a2's
	// addresses retired.
	restartManager(g, source)
	createClaim(g, src, clusterB, "new-0", kind, pool, nil)
	g.Expect(waitBound(g, src, nsB, 6)["new-0"]).NotTo(BeElementOf(heldByA), "the source, restarted, hands out an address a2 holds")

	t.Log("a hand-over while b2 holds addresses on the source yields no token")
	annotate(src, sourcePool, v1alpha1.HandOverAnnotation, ptr.To(""))
	g.Consistently(annotation(src, sourcePool, v1alpha1.HandoverTokenAnnotation), "5s").Should(BeEmpty())
	createClaim(g, src, clusterB, "new-1", kind, pool, nil)
	g.Expect(waitBound(g, src, nsB, 7)["new-1"]).NotTo(BeElementOf(heldByA), "the source still serves b2")
	annotate(src, sourcePool, v1alpha1.HandOverAnnotation, nil)
	before[nsB] = boundAddresses(g, src, nsB)

	t.Log("moving b2, then handing the pool over to the target")
	move(t, g, nsB)
	g.Eventually(func(g Gomega) map[string]string { return boundAddresses(g, dst, nsB) }).Should(Equal(before[nsB]))
	expectNoAddresses(g, src, nsB)
	waitsForSource()
	annotate(src, sourcePool, v1alpha1.HandOverAnnotation, ptr.To(""))
	secretRef := ""
	g.Eventually(func(g Gomega) string {
		secretRef = annotation(src, sourcePool, v1alpha1.HandoverTokenAnnotation)(g)
		return secretRef
	}).ShouldNot(BeEmpty(), "the source hands the pool over")

	t.Log("a take-over forged from what the target's copy shows is refused")
	annotate(dst, targetPool, v1alpha1.TakeOverAnnotation, ptr.To(sourceIdentity+".forged-by-a-tenant"))
	g.Eventually(annotation(dst, targetPool, v1alpha1.TakeOverAnnotation)).Should(BeEmpty(), "the target reads the take-over")
	g.Expect(annotation(dst, targetPool, v1alpha1.AllocatingClusterAnnotation)(g)).To(Equal(sourceIdentity), "the target took the pool over with a forged token")
	waitsForSource()

	t.Log("the token, read from the source's Secret, takes the pool over")
	namespace, name, _ := strings.Cut(secretRef, "/")
	secret := &corev1.Secret{}
	g.Expect(src.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret)).To(Succeed())
	annotate(dst, targetPool, v1alpha1.TakeOverAnnotation, ptr.To(string(secret.Data[v1alpha1.HandoverTokenKey])))
	g.Eventually(annotation(dst, targetPool, v1alpha1.AllocatingClusterAnnotation)).Should(And(Not(BeEmpty()), Not(Equal(sourceIdentity))),
		"the target stamps the pool as its own")
	waitBound(g, dst, nsA, 6)

	t.Log("in the end every claim is bound on the target, to an address of its own")
	g.Expect(duplicates(g, dst, kind, pool, nsA, nsB)).To(BeEmpty(), "addresses held twice on the target")
	g.Eventually(func(g Gomega) {
		for _, ns := range []string{nsA, nsB} {
			claims := &ipamv1.IPAddressClaimList{}
			g.Expect(dst.List(ctx, claims, client.InNamespace(ns))).To(Succeed())
			g.Expect(boundAddresses(g, dst, ns)).To(HaveLen(len(claims.Items)), "every claim of %s bound", ns)
		}
	}).Should(Succeed())
	// The second move found the pool on the target and kept the source
	// pool's UID in b2's owner references; the target's manager fixes them.
	g.Eventually(func(g Gomega) {
		for _, ns := range []string{nsA, nsB} {
			addresses := &ipamv1.IPAddressList{}
			g.Expect(dst.List(ctx, addresses, client.InNamespace(ns))).To(Succeed())
			for _, a := range addresses.Items {
				g.Expect(a.OwnerReferences).To(ContainElement(And(HaveField("Kind", kind), HaveField("UID", targetPool.UID))),
					"IPAddress %s/%s owned by the target's pool", ns, a.Name)
			}
		}
	}).Should(Succeed())
	expectEmpty(g, src, nsB)
	deleteNamespace(g, src, nsB)
}

// expectNoAddresses waits until ns holds no IPAddress on k8s: move copied
// the IPAddresses the global pool owns to the target and left them on the
// source, without their claims, for the source's manager to release.
func expectNoAddresses(g Gomega, k8s client.Client, ns string) {
	g.Eventually(func(g Gomega) []string {
		list := &ipamv1.IPAddressList{}
		g.Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		var left []string
		for _, a := range list.Items {
			left = append(left, fmt.Sprintf("%s (%s, finalizers %v)", a.Name, a.Spec.Address, a.Finalizers))
		}
		return left
	}).Should(BeEmpty(), "addresses left in %s on the source", ns)
}
