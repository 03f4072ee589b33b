package move

import (
	"maps"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// TestDeletionsUnderTheCollector deletes, on a management cluster whose
// garbage collector and namespace controller run (envtest alone has
// neither), what users and controllers delete with each propagation
// policy: claims in the foreground and orphaning their dependents, a
// Cluster in the foreground (the collector then deletes its claims), and a
// namespace that still holds its pool, a Cluster and its bound claims (the
// namespace controller deletes them all, in its own order, and retries
// what is refused). Every release frees its address, which the next claim
// gets, and leaves no allocation record behind; no address is held twice.
func TestDeletionsUnderTheCollector(t *testing.T) {
	g := newG(t)
	k8s := source.Client
	const kind, pool = v1alpha1.MetalVRFIPPoolKind, "nodes"
	ns := newPoolNamespace(g, "deletions", pool, "10.40.0.0/24", "10.40.0.1")
	first := createCluster(g, k8s, ns, "first")
	for _, name := range []string{"foreground", "orphan", "kept-0", "kept-1"} {
		createClaim(g, k8s, first, name, kind, pool, nil)
	}
	bound := waitBound(g, k8s, ns, 4)

	t.Log("a claim deleted in the foreground, and one orphaning its dependents, are released")
	for name, policy := range map[string]metav1.DeletionPropagation{"foreground": metav1.DeletePropagationForeground, "orphan": metav1.DeletePropagationOrphan} {
		claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		g.Expect(k8s.Delete(ctx, claim, client.PropagationPolicy(policy))).To(Succeed())
	}
	expectGone(g, k8s, ns, "foreground", "orphan")
	g.Eventually(func(g Gomega) []string { return slices.Sorted(maps.Keys(boundAddresses(g, k8s, ns))) }).Should(Equal([]string{"kept-0", "kept-1"}))
	expectRecords(g, ns, "kept-0", "kept-1")
	for _, name := range []string{"again-0", "again-1"} {
		createClaim(g, k8s, first, name, kind, pool, nil)
	}
	again := waitBound(g, k8s, ns, 4)
	g.Expect([]string{again["again-0"], again["again-1"]}).To(ConsistOf(bound["foreground"], bound["orphan"]),
		"the released addresses, the lowest free, go to the next claims")
	g.Expect(duplicates(g, k8s, kind, pool, ns)).To(BeEmpty(), "addresses held twice")

	t.Log("the Cluster deleted in the foreground: the collector deletes its claims, each released")
	g.Expect(k8s.Delete(ctx, first, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(first), &clusterv1.Cluster{}))
	}).Should(BeTrue(), "Cluster %s deleted", first.Name)
	expectGone(g, k8s, ns, "kept-0", "kept-1", "again-0", "again-1")
	expectRecords(g, ns)

	t.Log("the namespace deleted with its pool, a Cluster and its bound claims in it")
	second := createCluster(g, k8s, ns, "second")
	for _, name := range []string{"last-0", "last-1", "last-2"} {
		createClaim(g, k8s, second, name, kind, pool, nil)
	}
	waitBound(g, k8s, ns, 3)
	deleteNamespace(g, k8s, ns)
	expectRecords(g, ns)
}

// expectGone waits until the claims named of ns, and their IPAddresses,
// are gone from k8s.
func expectGone(g Gomega, k8s client.Client, ns string, claims ...string) {
	g.Eventually(func(g Gomega) []string {
		var left []string
		for _, name := range claims {
			key := client.ObjectKey{Namespace: ns, Name: name}
			if !apierrors.IsNotFound(k8s.Get(ctx, key, &ipamv1.IPAddressClaim{})) {
				left = append(left, "IPAddressClaim "+name)
			}
			if !apierrors.IsNotFound(k8s.Get(ctx, key, &ipamv1.IPAddress{})) {
				left = append(left, "IPAddress "+name)
			}
		}
		return left
	}).Should(BeEmpty(), "claims and IPAddresses left in %s", ns)
}

// expectRecords waits until the source's allocation records of the claims
// of ns are those of the claims named, one each.
func expectRecords(g Gomega, ns string, claims ...string) {
	g.Eventually(func(g Gomega) []string {
		held, err := source.AllocationRecords(ctx, ns)
		g.Expect(err).NotTo(HaveOccurred())
		return slices.Sorted(maps.Values(held))
	}).Should(Equal(slices.Sorted(slices.Values(claims))), "the allocation records of %s", ns)
}
