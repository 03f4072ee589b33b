package move

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// globalPoolSpec is the spec GitOps applies, the same in every management
// cluster, of the global pools of the tests below.
func globalPoolSpec(addresses, gateway string) v1alpha1.MetalVRFIPPoolSpec {
	return v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{addresses}, Prefix: ptr.To[int32](24), Gateway: gateway}
}

// allocatingCluster waits until the copy of the global pool on k8s names an
// allocating cluster, and returns it.
func allocatingCluster(g Gomega, k8s client.Client, pool string) string {
	var allocating string
	g.Eventually(func(g Gomega) string {
		p := &v1alpha1.GlobalMetalVRFIPPool{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: pool}, p)).To(Succeed())
		allocating = p.Annotations[v1alpha1.AllocatingClusterAnnotation]
		return allocating
	}).ShouldNot(BeEmpty(), "the copy of %s names its allocating cluster", pool)
	return allocating
}

// TestMoveIntoAClusterWithItsOwnCopyOfAGlobalPool moves a namespace whose
// claims a GlobalMetalVRFIPPool serves into a management cluster that has a
// copy of its own already (GitOps applies the pool to every management
// cluster): move keeps the target's copy, which named its own cluster as
// allocating when it was created. Admitting the moved IPAddresses would
// leave two management clusters allocating the pool, the target's copy
// serving the moved clusters' next claims from a ledger that never knew the
// source's: the move is refused, naming the IPAddress's annotation, and
// nothing moved is bound on the target. The documented way on (delete the
// target's copy, which holds nothing, and move again) moves the namespace
// under the source's copy.
func TestMoveIntoAClusterWithItsOwnCopyOfAGlobalPool(t *testing.T) {
	g := newG(t)
	src, dst := source.Client, target.Client
	const kind, pool = v1alpha1.GlobalMetalVRFIPPoolKind, "applied-everywhere"
	spec := globalPoolSpec("10.42.0.2-10.42.0.40", "10.42.0.1")
	for _, k8s := range []client.Client{src, dst} {
		g.Expect(k8s.Create(ctx, &v1alpha1.GlobalMetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: spec})).To(Succeed())
	}
	sourceIdentity, targetIdentity := allocatingCluster(g, src, pool), allocatingCluster(g, dst, pool)
	g.Expect(targetIdentity).NotTo(Equal(sourceIdentity))

	ns, err := source.NewNamespace(ctx, "move-copy")
	g.Expect(err).NotTo(HaveOccurred())
	cluster := createCluster(g, src, ns, "c")
	// One claim: clusterctl retries a refused create for over two minutes.
	createClaim(g, src, cluster, "claim", kind, pool, nil)
	before := waitBound(g, src, ns, 1)
	list := &ipamv1.IPAddressList{}
	g.Expect(src.List(ctx, list, client.InNamespace(ns))).To(Succeed())
	for _, a := range list.Items {
		g.Expect(a.Annotations).To(HaveKeyWithValue(v1alpha1.AllocatedInAnnotation, sourceIdentity), "IPAddress %s names the cluster that handed it out", a.Name)
	}

	err = <-startMove(t, ns)
	g.Expect(err).To(MatchError(ContainSubstring(v1alpha1.AllocatedInAnnotation)),
		"the target's copy allocating on its own admitted the moved IPAddresses")
	g.Expect(boundAddresses(g, dst, ns)).To(BeEmpty(), "claims bound on the target")
	g.Expect(allocatingCluster(g, dst, pool)).To(Equal(targetIdentity))

	t.Log("resuming the Cluster move left paused on the source, deleting the target's copy, which holds nothing, and moving again")
	cluster = getCluster(g, src, ns, "c")
	base := cluster.DeepCopy()
	cluster.Spec.Paused = nil
	g.Expect(src.Patch(ctx, cluster, client.MergeFrom(base))).To(Succeed())
	g.Expect(dst.Delete(ctx, &v1alpha1.GlobalMetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}})).To(Succeed())
	g.Eventually(func() bool {
		err := dst.Get(ctx, client.ObjectKey{Name: pool}, &v1alpha1.GlobalMetalVRFIPPool{})
		return err != nil && client.IgnoreNotFound(err) == nil
	}).Should(BeTrue(), "the target's copy is gone")
	move(t, g, ns)
	g.Eventually(func(g Gomega) map[string]string { return boundAddresses(g, dst, ns) }).Should(Equal(before))
	g.Expect(allocatingCluster(g, dst, pool)).To(Equal(sourceIdentity), "the target's copy is move's, naming the source")
	g.Expect(allocatingCluster(g, src, pool)).To(Equal(sourceIdentity))
}

// TestAGlobalPoolReCreatedFromGitNamesNoAllocator deletes the target's copy
// of a global pool, which keeps the addresses of a namespace moved from the
// source, and creates it again as Git has it, without the annotations the
// managers wrote. The source still allocates the pool: the copy must not
// name its own cluster on finding IPAddresses the source handed out, or both
// would hand out the same addresses. It names none and serves no new claim
// until an administrator re-creates it with the source's annotations.
func TestAGlobalPoolReCreatedFromGitNamesNoAllocator(t *testing.T) {
	g := newG(t)
	src, dst := source.Client, target.Client
	const kind, pool = v1alpha1.GlobalMetalVRFIPPoolKind, "from-git"
	spec := globalPoolSpec("10.43.0.2-10.43.0.40", "10.43.0.1")
	g.Expect(src.Create(ctx, &v1alpha1.GlobalMetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: spec})).To(Succeed())
	sourceIdentity := allocatingCluster(g, src, pool)
	ns, err := source.NewNamespace(ctx, "move-git")
	g.Expect(err).NotTo(HaveOccurred())
	cluster := createCluster(g, src, ns, "c")
	for i := range 2 {
		createClaim(g, src, cluster, fmt.Sprintf("claim-%d", i), kind, pool, nil)
	}
	before := waitBound(g, src, ns, 2)
	move(t, g, ns)
	g.Eventually(func(g Gomega) map[string]string { return boundAddresses(g, dst, ns) }).Should(Equal(before))

	t.Log("GitOps deletes the target's copy and applies it again")
	copyOnTarget := &v1alpha1.GlobalMetalVRFIPPool{}
	g.Expect(dst.Get(ctx, client.ObjectKey{Name: pool}, copyOnTarget)).To(Succeed())
	base := copyOnTarget.DeepCopy()
	metav1.SetMetaDataAnnotation(&copyOnTarget.ObjectMeta, v1alpha1.SkipDeleteValidationAnnotation, "")
	g.Expect(dst.Patch(ctx, copyOnTarget, client.MergeFrom(base))).To(Succeed())
	sourceAnnotations := map[string]string{}
	for _, key := range []string{v1alpha1.AllocatingClusterAnnotation, v1alpha1.HandoverHashAnnotation} {
		sourceAnnotations[key] = copyOnTarget.Annotations[key]
	}
	recreate := func(annotations map[string]string) {
		g.Expect(dst.Delete(ctx, &v1alpha1.GlobalMetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Name: pool}})).To(Succeed())
		g.Eventually(func() bool {
			err := dst.Get(ctx, client.ObjectKey{Name: pool}, &v1alpha1.GlobalMetalVRFIPPool{})
			return err != nil && client.IgnoreNotFound(err) == nil
		}).Should(BeTrue(), "the target's copy is gone")
		g.Expect(dst.Create(ctx, &v1alpha1.GlobalMetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Name: pool, Annotations: annotations}, Spec: spec,
		})).To(Succeed())
	}
	recreate(nil)
	// annotation reads the target's copy's allocating cluster.
	annotation := func(g Gomega) string {
		p := &v1alpha1.GlobalMetalVRFIPPool{}
		g.Expect(dst.Get(ctx, client.ObjectKey{Name: pool}, p)).To(Succeed())
		return p.Annotations[v1alpha1.AllocatingClusterAnnotation]
	}
	g.Consistently(annotation, "5s").Should(BeEmpty(), "the re-created copy named an allocating cluster while the source allocates")
	clusterOnTarget := getCluster(g, dst, ns, "c")
	createClaim(g, dst, clusterOnTarget, "new", kind, pool, nil)
	g.Consistently(func(g Gomega) map[string]string { return boundAddresses(g, dst, ns) }).Should(Equal(before),
		"the moved claims keep their addresses, and the new claim waits")
	g.Eventually(func(g Gomega) []string {
		var list eventsv1.EventList
		g.Expect(dst.List(ctx, &list)).To(Succeed())
		var reasons []string
		for _, e := range list.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == pool {
				reasons = append(reasons, e.Reason)
			}
		}
		return reasons
	}).Should(ContainElement(v1alpha1.AllocatorInDoubtReason))

	t.Log("re-created with the source's annotations, the copy keeps to the source")
	base = &v1alpha1.GlobalMetalVRFIPPool{}
	g.Expect(dst.Get(ctx, client.ObjectKey{Name: pool}, base)).To(Succeed())
	skip := base.DeepCopy()
	metav1.SetMetaDataAnnotation(&skip.ObjectMeta, v1alpha1.SkipDeleteValidationAnnotation, "")
	g.Expect(dst.Patch(ctx, skip, client.MergeFrom(base))).To(Succeed())
	recreate(sourceAnnotations)
	g.Consistently(annotation, "3s").Should(Equal(sourceIdentity))
	g.Eventually(func(g Gomega) {
		ready := readyCondition(g, dst, ns, "new")
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(ipamv1.IPAddressClaimReadyPoolNotReadyReason))
		g.Expect(ready.Message).To(ContainSubstring("allocates in management cluster " + sourceIdentity))
	}).Should(Succeed())
	g.Expect(boundAddresses(g, dst, ns)).To(Equal(before))
}
