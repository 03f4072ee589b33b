package move

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// TestMoveClaimWithoutOwner pins what docs/install.md ("What moves with
// what") warns of: a claim that nothing clusterctl moves owns stays on the
// source, bound, with its IPAddress, while its pool moves; the target knows
// nothing of its address. The claim left behind can still be deleted.
func TestMoveClaimWithoutOwner(t *testing.T) {
	g := newG(t)
	src, dst := source.Client, target.Client
	const kind, pool = v1alpha1.MetalVRFIPPoolKind, "nodes"
	ns := newPoolNamespace(g, "move-unowned", pool, "10.50.0.2-10.50.0.20", "10.50.0.1")
	cluster := createCluster(g, src, ns, "c")
	createClaim(g, src, cluster, "owned", kind, pool, nil)
	g.Expect(src.Create(ctx, &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unowned"},
		Spec:       ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: kind, Name: pool}},
	})).To(Succeed())
	before := waitBound(g, src, ns, 2)

	move(t, g, ns)

	g.Eventually(func(g Gomega) map[string]string { return boundAddresses(g, dst, ns) }).Should(Equal(map[string]string{"owned": before["owned"]}),
		"the owned claim moved with its address, the unowned one did not")
	g.Expect(boundAddresses(g, src, ns)).To(Equal(map[string]string{"unowned": before["unowned"]}),
		"the unowned claim stays on the source, bound")
	pools := &v1alpha1.MetalVRFIPPoolList{}
	g.Expect(src.List(ctx, pools, client.InNamespace(ns))).To(Succeed())
	g.Expect(pools.Items).To(BeEmpty(), "its pool moved")

	unowned := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unowned"}}
	g.Expect(src.Delete(ctx, unowned)).To(Succeed())
	g.Eventually(func() bool {
		err := src.Get(ctx, client.ObjectKeyFromObject(unowned), unowned)
		return client.IgnoreNotFound(err) == nil && err != nil
	}).Should(BeTrue(), "the claim left on the source, whose pool is gone, can be deleted")
}
