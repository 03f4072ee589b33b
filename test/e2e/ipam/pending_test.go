package ipam

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// The IPAddress webhook records an address before the API server creates
// its IPAddress; here a ResourceQuota refuses the creations after it (the
// API server checks quotas after the validating webhooks; a
// ValidatingAdmissionPolicy would refuse them before the webhook is
// called).
var _ = Describe("Records of IPAddresses that were never created", func() {
	const grace = 10 * time.Second

	BeforeEach(func() {
		// A manager that reaps within seconds, instead of the suite's.
		opts := ipamOptions()
		opts.PendingRecordGrace = grace
		replaceIPAM(opts)
	})

	It("are reaped after the grace period, and a claim has at most four at once", func() {
		ns := newNamespace()
		pool := createPool(ns, "pool", poolSpec(28, "10.66.0.1", "10.66.0.0/28"))

		By("a quota that lets the namespace have one IPAddress: the claim's")
		quota := ipAddressQuota(ns, "1")
		claim := createClaim(ns, "target", v1alpha1.MetalVRFIPPoolKind, pool.Name)
		Expect(boundAddress(claim).Spec.Address).To(Equal("10.66.0.2"))

		squat := func(ip string) *ipamv1.IPAddress {
			return &ipamv1.IPAddress{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "squat-" + ip, OwnerReferences: []metav1.OwnerReference{
					{APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: claim.Name, UID: claim.UID, Controller: ptr.To(true)},
				}},
				Spec: ipamv1.IPAddressSpec{
					ClaimRef: ipamv1.IPAddressClaimReference{Name: claim.Name},
					PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: pool.Name},
					Address:  ip, Prefix: ptr.To(int32(28)), Gateway: "10.66.0.1",
				},
			}
		}
		recordsOfClaim := func() []string {
			records, err := env.AllocationRecords(ctx, ns)
			Expect(err).NotTo(HaveOccurred())
			var held []string
			for ip, name := range records {
				if name == claim.Name {
					held = append(held, ip)
				}
			}
			return held
		}
		reapedBefore := reapedRecords()

		By("IPAddresses of the claim that the webhook records and the quota refuses, until the webhook refuses one")
		// Were the machine so slow that the first records are reaped
		// before the fifth is admitted, the next ones take their place.
		var refusedByQuota int
		var bound error
		for i := 3; i <= 14 && bound == nil; i++ {
			ip := fmt.Sprintf("10.66.0.%d", i)
			err := k8s.Create(ctx, squat(ip))
			Expect(err).To(HaveOccurred(), "the quota let IPAddress %s be created", ip)
			if !strings.Contains(err.Error(), "exceeded quota") {
				bound = err
				break
			}
			refusedByQuota++
			Expect(recordsOfClaim()).To(ContainElement(ip), "the webhook did not record %s before the quota refused it", ip)
		}
		Expect(bound).To(HaveOccurred(), "the claim was made to hold %d addresses no IPAddress names", refusedByQuota)
		Expect(refusedByQuota).To(BeNumerically(">=", 4))
		Expect(bound.Error()).To(And(
			ContainSubstring("spec.claimRef.name"), ContainSubstring(fmt.Sprintf("claim %s/%s has 4 addresses", ns, claim.Name)),
			ContainSubstring("recorded for IPAddresses that were not created"),
		))

		By("the records are reaped after the grace period; the claim keeps its own")
		Eventually(recordsOfClaim).WithTimeout(2*time.Minute + grace).Should(ConsistOf("10.66.0.2"))
		Expect(reapedRecords() - reapedBefore).To(BeNumerically(">=", refusedByQuota))

		By("a later claim is served a reaped address")
		Expect(k8s.Delete(ctx, quota)).To(Succeed())
		later := createClaim(ns, "later", v1alpha1.MetalVRFIPPoolKind, pool.Name)
		Expect(boundAddress(later).Spec.Address).To(Equal("10.66.0.3"))
	})
})

// An administrator (as clusterctl move and restores run) may write an
// IPAddress for a claim that does not exist yet; refused after the webhook
// recorded it, its record names no live claim, and must not hold the
// address for good. Before the reaper looked at such records, the claim
// below was still not bound 30 s after the refusal (grace 5 s): the pool's
// last address stayed recorded for claim ghost until the next seeding.
var _ = Describe("The record of an administrator's IPAddress refused after the webhook, for a claim that does not exist", func() {
	It("is reaped, and the address goes to a claim", func() {
		opts := ipamOptions()
		opts.PendingRecordGrace = 5 * time.Second
		replaceIPAM(opts)
		ns := newNamespace()
		pool := createPool(ns, "two", poolSpec(29, "10.68.0.1", "10.68.0.2-10.68.0.3"))
		// Served once: the manager has read the pool's addresses in use,
		// and holds the records in memory from now on.
		Expect(boundAddress(createClaim(ns, "first", v1alpha1.MetalVRFIPPoolKind, pool.Name)).Spec.Address).To(Equal("10.68.0.2"))
		quota := ipAddressQuota(ns, "0")
		ghost := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ghost", OwnerReferences: []metav1.OwnerReference{
				{APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: "ghost", UID: "ghost-uid", Controller: ptr.To(true)}}},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: "ghost"},
				PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: pool.Name},
				Address:  "10.68.0.3", Prefix: ptr.To(int32(29)), Gateway: "10.68.0.1",
			},
		}
		Expect(k8s.Create(ctx, ghost)).To(MatchError(ContainSubstring("exceeded quota")))
		Expect(env.AllocationRecords(ctx, ns)).To(HaveKeyWithValue("10.68.0.3", "ghost"), "the webhook recorded the address before the quota refused it")
		Expect(k8s.Delete(ctx, quota)).To(Succeed())
		claim := createClaim(ns, "real", v1alpha1.MetalVRFIPPoolKind, pool.Name)
		Expect(boundAddress(claim).Spec.Address).To(Equal("10.68.0.3"), "the refused IPAddress's record holds the pool's last address")
	})
})

// The manager records a claim's address before it creates the claim's
// IPAddress; when another admission (here a quota) refuses that creation
// and the claim is then deleted, no IPAddress and no claim is left to
// release the record. Before the deletion of a claim never bound had its
// records reaped, the pool's only address stayed recorded for the deleted
// claim until the next seeding, and the later claim was never served.
var _ = Describe("The record of a claim whose IPAddress an admission refused, once the claim is deleted", func() {
	It("is reaped, and the address goes to a later claim", func() {
		opts := ipamOptions()
		opts.PendingRecordGrace = 5 * time.Second
		replaceIPAM(opts)
		ns := newNamespace()
		pool := createPool(ns, "one", poolSpec(29, "10.69.0.1", "10.69.0.2-10.69.0.2"))
		quota := ipAddressQuota(ns, "0")
		reapedBefore := reapedRecords()

		refused := createClaim(ns, "refused", v1alpha1.MetalVRFIPPoolKind, pool.Name)
		Eventually(func() (map[string]string, error) { return env.AllocationRecords(ctx, ns) }).
			Should(HaveKeyWithValue("10.69.0.2", refused.Name), "the manager recorded the address before the quota refused its IPAddress")
		Consistently(func() (string, error) {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(refused), refused)
			return refused.Status.AddressRef.Name, err
		}).WithTimeout(2*time.Second).Should(BeEmpty(), "the claim was bound past the quota")
		Expect(k8s.Delete(ctx, refused)).To(Succeed())
		Expect(k8s.Delete(ctx, quota)).To(Succeed())

		later := createClaim(ns, "later", v1alpha1.MetalVRFIPPoolKind, pool.Name)
		Expect(boundAddress(later).Spec.Address).To(Equal("10.69.0.2"), "the deleted claim's record holds the pool's only address")
		Expect(reapedRecords() - reapedBefore).To(BeNumerically(">=", 1))
	})
})

// ipAddressQuota makes a ResourceQuota that lets namespace ns have at most
// hard IPAddresses, none in use yet.
func ipAddressQuota(ns, hard string) *corev1.ResourceQuota {
	GinkgoHelper()
	ipAddresses := corev1.ResourceName("count/ipaddresses.ipam.cluster.x-k8s.io")
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ipaddresses"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{ipAddresses: resource.MustParse(hard)}}}
	Expect(k8s.Create(ctx, quota)).To(Succeed())
	// No quota controller runs on envtest: the status it would write.
	quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard, Used: corev1.ResourceList{ipAddresses: resource.MustParse("0")}}
	Expect(k8s.Status().Update(ctx, quota)).To(Succeed())
	return quota
}

// reapedRecords reads the provider's count of reaped records, summed over
// pool kinds, from the in-process metrics registry.
func reapedRecords() float64 {
	GinkgoHelper()
	return counterSum("metal_vrf_ipam_reaped_records_total", func(map[string]string) bool { return true })
}
