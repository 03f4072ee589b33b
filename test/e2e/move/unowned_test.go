package move

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// TestMoveClaimWithoutOwner documents, without asserting the provider's
// behaviour, what becomes of a claim nothing clusterctl moves owns: move
// takes its pool and leaves the claim on the source. The test logs both
// sides some seconds after the move, what a new claim on the target gets,
// and whether the claim left on the source can be deleted.
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
	t.Logf("before the move: %v", waitBound(g, src, ns, 2))

	move(t, g, ns)
	// Leave both managers time to act on what the move did.
	time.Sleep(5 * time.Second)
	logNamespace(t, g, "source", src, ns)
	logNamespace(t, g, "target", dst, ns)

	createClaim(g, dst, getCluster(g, dst, ns, cluster.Name), "new", kind, pool, nil)
	g.Eventually(func(g Gomega) map[string]string { return boundAddresses(g, dst, ns) }).Should(HaveKey("new"))
	logNamespace(t, g, "target, after a new claim", dst, ns)
	// The source keeps a claim whose pool is gone: see whether deleting it
	// hangs.
	unowned := client.ObjectKey{Namespace: ns, Name: "unowned"}
	g.Expect(client.IgnoreNotFound(src.Delete(ctx, &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: unowned.Name}}))).To(Succeed())
	err := src.Get(ctx, unowned, &ipamv1.IPAddressClaim{})
	for deadline := time.Now().Add(10 * time.Second); err == nil && time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		err = src.Get(ctx, unowned, &ipamv1.IPAddressClaim{})
	}
	t.Logf("source: the unowned claim 10s after its deletion: %v", err)
	logNamespace(t, g, "source, after deleting the unowned claim", src, ns)
}

// logNamespace logs the claims (with their address and Ready condition),
// the IPAddresses (with their claim and owners) and the pools of ns on k8s.
func logNamespace(t *testing.T, g Gomega, side string, k8s client.Client, ns string) {
	claims := &ipamv1.IPAddressClaimList{}
	g.Expect(k8s.List(ctx, claims, client.InNamespace(ns))).To(Succeed())
	for _, c := range claims.Items {
		t.Logf("%s: claim %s addressRef=%q finalizers=%v deleting=%v Ready=%+v", side, c.Name, c.Status.AddressRef.Name,
			c.Finalizers, c.DeletionTimestamp != nil, readyCondition(g, k8s, ns, c.Name))
	}
	addresses := &ipamv1.IPAddressList{}
	g.Expect(k8s.List(ctx, addresses, client.InNamespace(ns))).To(Succeed())
	for _, a := range addresses.Items {
		var owners []string
		for _, o := range a.OwnerReferences {
			owners = append(owners, o.Kind+"/"+o.Name)
		}
		t.Logf("%s: IPAddress %s %s claim=%s owners=%v finalizers=%v", side, a.Name, a.Spec.Address, a.Spec.ClaimRef.Name, owners, a.Finalizers)
	}
	pools := &v1alpha1.MetalVRFIPPoolList{}
	g.Expect(k8s.List(ctx, pools, client.InNamespace(ns))).To(Succeed())
	for _, p := range pools.Items {
		t.Logf("%s: pool %s ipAddresses=%+v", side, p.Name, p.Status.IPAddresses)
	}
}
