package move

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// TestMoveNamespacedPool moves a namespace whose Cluster's claims draw from
// a MetalVRFIPPool of the namespace: bound claims, one bound to the address
// it requested, and claims created while move had paused the Cluster, which
// move unbound. On the target the moved claims keep their addresses and the
// unbound ones get others: the target must learn the moved addresses before
// it hands out any.
func TestMoveNamespacedPool(t *testing.T) {
	g := newG(t)
	src, dst := source.Client, target.Client
	const kind, pool, requestedAddress = v1alpha1.MetalVRFIPPoolKind, "nodes", "10.30.0.200"
	ns := newPoolNamespace(g, "move", pool, "10.30.0.0/24", "10.30.0.1")
	cluster := createCluster(g, src, ns, "a")
	for i := range 40 {
		createClaim(g, src, cluster, fmt.Sprintf("claim-%02d", i), kind, pool, nil)
	}
	createClaim(g, src, cluster, "requested", kind, pool, map[string]string{v1alpha1.RequestedAddressAnnotation: requestedAddress})
	before := waitBound(g, src, ns, 41)
	g.Expect(before).To(HaveKeyWithValue("requested", requestedAddress))

	// Claims created while move has paused their Cluster wait, and move
	// unbound. move refuses a Cluster paused before it starts, so the
	// waiting claims are created paused themselves and resumed once move
	// has paused their Cluster.
	waiting := []string{"waiting-0", "waiting-1", "waiting-2"}
	for _, name := range waiting {
		createClaim(g, src, cluster, name, kind, pool, map[string]string{clusterv1.PausedAnnotation: ""})
	}
	moveWhilePaused(t, g, cluster, func() {
		for _, name := range waiting {
			claim := &ipamv1.IPAddressClaim{}
			g.Expect(src.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, claim)).To(Succeed())
			base := claim.DeepCopy()
			delete(claim.Annotations, clusterv1.PausedAnnotation)
			g.Expect(src.Patch(ctx, claim, client.MergeFrom(base))).To(Succeed())
		}
		g.Consistently(func(g Gomega) map[string]string { return boundAddresses(g, src, ns) }).Should(HaveLen(41), "the waiting claims stay unbound")
	})

	// The waiting claims are served first; the check for addresses held
	// twice comes before the one that all claims are bound, whose failure
	// would hide it.
	g.Eventually(func(g Gomega) map[string]string { return boundAddresses(g, dst, ns) }).Should(And(
		HaveKey(waiting[0]), HaveKey(waiting[1]), HaveKey(waiting[2])), "the waiting claims served on the target")
	g.Expect(duplicates(g, dst, kind, pool, ns)).To(BeEmpty(), "addresses held twice on the target")
	after := waitBound(g, dst, ns, 44)
	for name, address := range before {
		g.Expect(after).To(HaveKeyWithValue(name, address), "moved claim %s keeps its address", name)
	}
	targetPool := &v1alpha1.MetalVRFIPPool{}
	g.Expect(dst.Get(ctx, client.ObjectKey{Namespace: ns, Name: pool}, targetPool)).To(Succeed())
	g.Eventually(func(g Gomega) {
		claims := &ipamv1.IPAddressClaimList{}
		g.Expect(dst.List(ctx, claims, client.InNamespace(ns))).To(Succeed())
		for _, c := range claims.Items {
			g.Expect(readyCondition(g, dst, ns, c.Name)).To(HaveField("Status", metav1.ConditionTrue), "claim %s Ready", c.Name)
		}
	}).Should(Succeed())
	// The count needs no change after the move to be right.
	g.Eventually(func(g Gomega) {
		g.Expect(dst.Get(ctx, client.ObjectKeyFromObject(targetPool), targetPool)).To(Succeed())
		counts := targetPool.Status.IPAddresses
		g.Expect(counts).NotTo(BeNil())
		g.Expect(counts.Used).To(BeEquivalentTo(44))
		total, err := strconv.Atoi(counts.Total)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(counts.Free).To(Equal(strconv.Itoa(total-44)), "free of %d", total)
	}).Should(Succeed(), "the target pool's counts")
	// move gives the IPAddresses the target pool's UID in their owner
	// references, so that the target's garbage collector keeps them.
	addresses := &ipamv1.IPAddressList{}
	g.Expect(dst.List(ctx, addresses, client.InNamespace(ns))).To(Succeed())
	for _, a := range addresses.Items {
		g.Expect(a.OwnerReferences).To(ContainElement(And(HaveField("Kind", kind), HaveField("UID", targetPool.UID))),
			"IPAddress %s owned by the target's pool", a.Name)
	}
	expectEmpty(g, src, ns)

	t.Log("new claims on the target get the lowest free addresses")
	used := slices.Collect(maps.Values(after))
	want := lowestFree(g, lowest(g, slices.Collect(maps.Values(before))), used, 2)
	moved := getCluster(g, dst, ns, cluster.Name)
	for _, name := range []string{"new-0", "new-1"} {
		createClaim(g, dst, moved, name, kind, pool, nil)
	}
	final := waitBound(g, dst, ns, 46)
	g.Expect([]string{final["new-0"], final["new-1"]}).To(ConsistOf(want))
	g.Expect(duplicates(g, dst, kind, pool, ns)).To(BeEmpty(), "addresses held twice on the target")
}
