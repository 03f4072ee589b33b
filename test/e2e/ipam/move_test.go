package ipam

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// What clusterctl move does to the IPAM provider, step by step on one API
// server; test/e2e/move runs the real clusterctl move between two.
var _ = Describe("What clusterctl move leaves", func() {
	It("records an IPAddress someone else creates before any claim could be served its address", func() {
		ns := newNamespace()
		pool := createPool(ns, "pool", poolSpec(29, "10.60.0.1", "10.60.0.0/29"))
		// A paused Cluster's claims, as move creates them on the target.
		cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "moved"}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(true)}}
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		pausedClaim := func(name string) *ipamv1.IPAddressClaim {
			claim := newClaim(ns, name, v1alpha1.MetalVRFIPPoolKind, pool.Name)
			claim.Labels = map[string]string{clusterv1.ClusterNameLabel: cluster.Name}
			Expect(k8s.Create(ctx, claim)).To(Succeed())
			return claim
		}
		// The IPAddress move creates, owned by the claim and by the pool
		// under the source pool's UID.
		movedAddress := func(claim *ipamv1.IPAddressClaim, address string) *ipamv1.IPAddress {
			return &ipamv1.IPAddress{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim.Name, OwnerReferences: []metav1.OwnerReference{
					{APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: claim.Name, UID: claim.UID, Controller: ptr.To(true)},
					{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.MetalVRFIPPoolKind, Name: pool.Name, UID: types.UID("source-pool-uid")},
				}},
				Spec: ipamv1.IPAddressSpec{
					ClaimRef: ipamv1.IPAddressClaimReference{Name: claim.Name},
					PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: pool.Name},
					Address:  address, Prefix: ptr.To(int32(29)), Gateway: "10.60.0.1",
				},
			}
		}
		moved := pausedClaim("moved")
		Expect(k8s.Create(ctx, movedAddress(moved, "10.60.0.2"))).To(Succeed())

		By("a claim served now skips the moved address")
		waiting := createClaim(ns, "waiting", v1alpha1.MetalVRFIPPoolKind, pool.Name)
		Expect(boundAddress(waiting).Spec.Address).To(Equal("10.60.0.3"))

		By("a second IPAddress of a held address is refused, naming the field and the value")
		dup := pausedClaim("dup")
		err := k8s.Create(ctx, movedAddress(dup, "10.60.0.3"))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(And(ContainSubstring("spec.address"), ContainSubstring(`"10.60.0.3"`), ContainSubstring("claim "+ns+"/waiting")))

		By("once the Cluster resumes, the moved claim is bound to its IPAddress, which names the pool here, and the counts follow")
		cluster.Spec.Paused = ptr.To(false)
		Expect(k8s.Update(ctx, cluster)).To(Succeed())
		Expect(boundAddress(moved).Spec.Address).To(Equal("10.60.0.2"))
		Eventually(func(g Gomega) {
			address := &ipamv1.IPAddress{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(moved), address)).To(Succeed())
			g.Expect(address.OwnerReferences).To(ContainElement(And(HaveField("Kind", v1alpha1.MetalVRFIPPoolKind), HaveField("UID", pool.UID))))
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
			g.Expect(pool.Status.IPAddresses).NotTo(BeNil())
			// moved, waiting, and dup (served once resumed).
			g.Expect(pool.Status.IPAddresses.Used).To(BeEquivalentTo(3))
		}).Should(Succeed())
		Expect(boundAddress(dup).Spec.Address).To(Equal("10.60.0.4"))
	})

	It("refuses an IPAddress of a pool it cannot find, even live, and admits it once the pool exists", func() {
		ns := newNamespace()
		address := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "early", OwnerReferences: []metav1.OwnerReference{
				{APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: "early", UID: types.UID("early-claim-uid"), Controller: ptr.To(true)},
			}},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: "early"},
				PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: "later"},
				Address:  "10.62.0.2", Prefix: ptr.To(int32(29)), Gateway: "10.62.0.1",
			},
		}
		err := k8s.Create(ctx, address.DeepCopy())
		Expect(err).To(MatchError(And(ContainSubstring("spec.poolRef"), ContainSubstring("retry once the pool exists"))),
			"an IPAddress of an unknown pool was let through unrecorded")
		createPool(ns, "later", poolSpec(29, "10.62.0.1", "10.62.0.0/29"))
		Eventually(func() error { return k8s.Create(ctx, address.DeepCopy()) }).Should(Succeed())
	})

	It("records an IPAddress whose claim UID is not a label value, and serves no claim its address", func() {
		ns := newNamespace()
		pool := createPool(ns, "pool", poolSpec(29, "10.64.0.1", "10.64.0.0/29"))
		cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "moved"}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(true)}}
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		address := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "odd", Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name},
				OwnerReferences: []metav1.OwnerReference{
					{APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: "odd", UID: types.UID("not a label value: " + strings.Repeat("x", 64)), Controller: ptr.To(true)},
				}},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: "odd"},
				PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: pool.Name},
				Address:  "10.64.0.2", Prefix: ptr.To(int32(29)), Gateway: "10.64.0.1",
			},
		}
		Expect(k8s.Create(ctx, address)).To(Succeed(), "a claim UID that is not a label value broke recording the address")
		waiting := createClaim(ns, "waiting", v1alpha1.MetalVRFIPPoolKind, pool.Name)
		Expect(boundAddress(waiting).Spec.Address).To(Equal("10.64.0.3"))
	})

	It("refuses an IPAddress of another namespace forged with the UID of the claim holding its address", func() {
		victimNS, forgerNS := newNamespace(), newNamespace()
		pool := createGlobalPool("shared-"+victimNS, poolSpec(29, "10.65.0.1", "10.65.0.0/29"))
		DeferCleanup(func() { deleteAndWait(pool) })
		victim := createClaim(victimNS, "victim", v1alpha1.GlobalMetalVRFIPPoolKind, pool.Name)
		DeferCleanup(func() { deleteAndWait(victim) })
		held := boundAddress(victim).Spec.Address
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(victim), victim)).To(Succeed())

		for _, name := range []string{"victim", "forged"} {
			forged := &ipamv1.IPAddress{
				ObjectMeta: metav1.ObjectMeta{Namespace: forgerNS, Name: name, OwnerReferences: []metav1.OwnerReference{
					{APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: name, UID: victim.UID, Controller: ptr.To(true)},
				}},
				Spec: ipamv1.IPAddressSpec{
					ClaimRef: ipamv1.IPAddressClaimReference{Name: name},
					PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: pool.Name},
					Address:  held, Prefix: ptr.To(int32(29)), Gateway: "10.65.0.1",
				},
			}
			err := k8s.Create(ctx, forged)
			Expect(err).To(MatchError(And(ContainSubstring("spec.address"), ContainSubstring(held))),
				"an IPAddress of namespace %s naming claim %s with the UID of %s/victim was admitted to %s's address", forgerNS, name, victimNS, held)
		}
	})

	It("frees the address of an IPAddress left without its claim only once the IPAddress is gone", func() {
		ns := newNamespace()
		pool := createPool(ns, "pool", poolSpec(29, "10.63.0.1", "10.63.0.0/29"))
		claim := createClaim(ns, "gone", v1alpha1.MetalVRFIPPoolKind, pool.Name)
		address := boundAddress(claim)
		const keep = "example.com/keep"

		By("another controller's finalizer holds the IPAddress, and its claim goes without a release")
		Expect(k8s.Patch(ctx, address, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/finalizers/-","value":"`+keep+`"}]`)))).To(Succeed())
		Expect(k8s.Delete(ctx, claim)).To(Succeed())
		Expect(client.IgnoreNotFound(k8s.Patch(ctx, claim, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":[]}}`))))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(address), address)).To(Succeed())
			g.Expect(address.DeletionTimestamp).NotTo(BeNil())
		}).Should(Succeed(), "the IPAddress left without its claim is deleted")

		By("a claim asking for its address does not get it while the IPAddress exists")
		again := newClaim(ns, "again", v1alpha1.MetalVRFIPPoolKind, pool.Name)
		again.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: address.Spec.Address}
		Expect(k8s.Create(ctx, again)).To(Succeed())
		Eventually(readyCondition).WithArguments(again).Should(HaveField("Reason", ipamv1.IPAddressClaimReadyAllocationFailedReason),
			"the address was freed while its IPAddress still exists")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(address), address)).To(Succeed())

		By("once the other finalizer goes, so does the IPAddress, and the address is free")
		Expect(k8s.Patch(ctx, address, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers/`+fmt.Sprint(slices.Index(address.Finalizers, keep))+`"}]`)))).To(Succeed())
		Expect(boundAddress(again).Spec.Address).To(Equal(address.Spec.Address))
	})

	DescribeTable("deletes a global pool's IPAddress whose claim is gone, and keeps its address out of use",
		func(name, prefix string, collectorFirst bool) {
			ns := newNamespace()
			pool := createGlobalPool(name+"-"+ns, poolSpec(29, prefix+".1", prefix+".0/29"))
			DeferCleanup(func() { deleteAndWait(pool) })
			cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "moving"}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(false)}}
			Expect(k8s.Create(ctx, cluster)).To(Succeed())
			claim := newClaim(ns, "gone", v1alpha1.GlobalMetalVRFIPPoolKind, pool.Name)
			claim.Labels = map[string]string{clusterv1.ClusterNameLabel: cluster.Name}
			Expect(k8s.Create(ctx, claim)).To(Succeed())
			address := boundAddress(claim)

			By("moving the claim away the way clusterctl does: Cluster paused, claim annotated delete-for-move, deleted with its finalizers dropped, Cluster deleted")
			cluster.Spec.Paused = ptr.To(true)
			Expect(k8s.Update(ctx, cluster)).To(Succeed())
			Expect(k8s.Patch(ctx, claim, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+clusterctlv1.DeleteForMoveAnnotation+`":""}}}`)))).To(Succeed())
			Expect(k8s.Delete(ctx, claim)).To(Succeed())
			Expect(client.IgnoreNotFound(k8s.Patch(ctx, claim, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":[]}}`))))).To(Succeed())
			if collectorFirst {
				By("the garbage collector strips the IPAddress's owner reference to the deleted claim first (the pool's keeps the IPAddress)")
				Expect(k8s.Get(ctx, client.ObjectKeyFromObject(address), address)).To(Succeed())
				collected := address.DeepCopy()
				collected.OwnerReferences = slices.DeleteFunc(collected.OwnerReferences, func(ref metav1.OwnerReference) bool { return ref.Kind == "IPAddressClaim" })
				Expect(collected.OwnerReferences).To(HaveLen(len(address.OwnerReferences)-1), "the IPAddress had an owner reference to its claim")
				Expect(k8s.Patch(ctx, collected, client.MergeFrom(address))).To(Succeed())
			}
			Expect(k8s.Delete(ctx, cluster)).To(Succeed())
			Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(address), &ipamv1.IPAddress{}) }).Should(Satisfy(func(err error) bool {
				return client.IgnoreNotFound(err) == nil && err != nil
			}), "the IPAddress left without its claim is deleted")

			By("its address is retired, not held by the claim that is gone (which the next seeding would sweep, freeing it here while the target holds it)")
			again := newClaim(ns, "again", v1alpha1.GlobalMetalVRFIPPoolKind, pool.Name)
			again.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: address.Spec.Address}
			Expect(k8s.Create(ctx, again)).To(Succeed())
			Eventually(readyCondition).WithArguments(again).Should(And(
				HaveField("Reason", ipamv1.IPAddressClaimReadyAllocationFailedReason),
				HaveField("Message", ContainSubstring("moved to another management cluster"))))
			expectPool(pool, func(g Gomega, pool v1alpha1.Pool) {
				g.Expect(haveCondition(g, pool, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReadyReason).Message).To(ContainSubstring("1 addresses whose IPAddresses were left without their claims"))
			})
			deleteAndWait(again)
		},
		Entry("the manager sees the orphan first", "retire", "10.61.0", false),
		Entry("the garbage collector stripped the deleted claim's owner reference first", "collected", "10.62.0", true),
	)

	It("hands a global pool out in one management cluster, over which it is handed with a token", func() {
		ns := newNamespace()
		system := &corev1.Namespace{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, system)).To(Succeed())
		here := string(system.UID)

		By("a new global pool is named after this management cluster")
		own := createGlobalPool("own-"+ns, poolSpec(29, "10.62.0.1", "10.62.0.0/29"))
		DeferCleanup(func() { deleteAndWait(own) })
		Eventually(func() string {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(own), own)
			return own.Annotations[v1alpha1.AllocatingClusterAnnotation]
		}).Should(Equal(here))

		By("a copy made elsewhere serves no claim")
		const sourceToken = "token-of-source-cluster"
		copied := &v1alpha1.GlobalMetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Name: "copy-" + ns, Annotations: map[string]string{
				v1alpha1.AllocatingClusterAnnotation: "source-cluster", v1alpha1.HandoverHashAnnotation: sha256Hex(sourceToken),
			}},
			Spec: poolSpec(29, "10.63.0.1", "10.63.0.0/29"),
		}
		Expect(k8s.Create(ctx, copied)).To(Succeed())
		DeferCleanup(func() { deleteAndWait(copied) })
		waiting := createClaim(ns, "waiting", v1alpha1.GlobalMetalVRFIPPoolKind, copied.Name)
		expectServedNowhere(waiting, copied, "allocates in management cluster source-cluster", v1alpha1.AllocatesElsewhereReason)

		annotate := func(pool *v1alpha1.GlobalMetalVRFIPPool, key, value string) {
			GinkgoHelper()
			patch := []byte(`{"metadata":{"annotations":{"` + key + `":"` + value + `"}}}`)
			Expect(k8s.Patch(ctx, pool, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
		}
		By("tokens made from what the copy shows are refused")
		for _, forged := range []string{"source-cluster.0123", sha256Hex(sourceToken)} {
			annotate(copied, v1alpha1.TakeOverAnnotation, forged)
			Eventually(func() map[string]string {
				_ = k8s.Get(ctx, client.ObjectKeyFromObject(copied), copied)
				return copied.Annotations
			}).ShouldNot(HaveKey(v1alpha1.TakeOverAnnotation))
			Expect(copied.Annotations).To(HaveKeyWithValue(v1alpha1.AllocatingClusterAnnotation, "source-cluster"))
			Expect(readyCondition(waiting).Reason).To(Equal(ipamv1.IPAddressClaimReadyPoolNotReadyReason))
		}

		By("its allocating cluster's token makes this cluster allocate, and the waiting claim is served")
		annotate(copied, v1alpha1.TakeOverAnnotation, sourceToken)
		Expect(boundAddress(waiting).Spec.Address).To(Equal("10.63.0.2"))
		Eventually(func() map[string]string {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(copied), copied)
			return copied.Annotations
		}).Should(And(HaveKeyWithValue(v1alpha1.AllocatingClusterAnnotation, here),
			HaveKey(v1alpha1.HandoverHashAnnotation), Not(HaveKeyWithValue(v1alpha1.HandoverHashAnnotation, sha256Hex(sourceToken)))),
			"this cluster stamps a token of its own")

		By("a hand-over waits while a claim here holds an address")
		annotate(copied, v1alpha1.HandOverAnnotation, "")
		expectPool(copied, func(g Gomega, pool v1alpha1.Pool) {
			g.Expect(haveCondition(g, pool, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReadyReason).Message).To(ContainSubstring("hand-over waits for the claims here to move: 1 in namespace " + ns))
		})
		Expect(copied.Annotations).NotTo(HaveKey(v1alpha1.HandoverTokenAnnotation))

		By("and happens once none does: the token in a Secret of the manager's namespace, and nothing more handed out here")
		deleteAndWait(waiting)
		var secretRef string
		Eventually(func() string {
			_ = k8s.Get(ctx, client.ObjectKeyFromObject(copied), copied)
			secretRef = copied.Annotations[v1alpha1.HandoverTokenAnnotation]
			return secretRef
		}).Should(Equal(testenv.AllocationNamespace + "/handover-" + string(copied.UID)))
		secret := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: testenv.AllocationNamespace, Name: "handover-" + string(copied.UID)}, secret)).To(Succeed())
		Expect(sha256Hex(string(secret.Data[v1alpha1.HandoverTokenKey]))).To(Equal(copied.Annotations[v1alpha1.HandoverHashAnnotation]))
		Expect(secret.OwnerReferences).To(ContainElement(HaveField("UID", copied.UID)), "the Secret goes with its pool")
		late := createClaim(ns, "late", v1alpha1.GlobalMetalVRFIPPoolKind, copied.Name)
		expectServedNowhere(late, copied, "handed over", v1alpha1.HandedOverReason)
		deleteAndWait(late)
	})
})

// expectServedNowhere waits until the claim waits on a global pool that
// hands out nothing here, saying why, and the pool says so with reason.
func expectServedNowhere(claim *ipamv1.IPAddressClaim, pool *v1alpha1.GlobalMetalVRFIPPool, why, reason string) {
	GinkgoHelper()
	Eventually(readyCondition).WithArguments(claim).Should(And(
		HaveField("Reason", ipamv1.IPAddressClaimReadyPoolNotReadyReason),
		HaveField("Message", ContainSubstring(why))))
	expectPool(pool, func(g Gomega, pool v1alpha1.Pool) {
		haveCondition(g, pool, v1alpha1.ReadyCondition, metav1.ConditionFalse, reason)
	})
}

// sha256Hex is the hash of token as a pool's hand-over hash holds it.
func sha256Hex(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
