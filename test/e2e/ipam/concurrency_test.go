package ipam

import (
	"fmt"
	"slices"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

var _ = Describe("Allocating under concurrency", func() {
	It("binds 500 claims created at once to 500 distinct addresses", func() {
		ns := newNamespace()
		createPool(ns, "pool", poolSpec(22, "10.4.0.1", "10.4.0.0/22"))
		claims := createClaimsAtOnce(ns, "claim", 500, 16)

		addresses := expectDistinctBound(claims)
		Expect(addresses).NotTo(HaveKey("10.4.0.1"), "the gateway is never handed out")
		Expect(addresses).NotTo(HaveKey("10.4.0.0"), "the network address is never handed out")
		// Lowest first: exactly the 500 addresses after the gateway.
		for i := 2; i < 502; i++ {
			Expect(addresses).To(HaveKey(fmt.Sprintf("10.4.%d.%d", i/256, i%256)))
		}

		pool := &v1alpha1.MetalVRFIPPool{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pool"}, pool)).To(Succeed())
			g.Expect(pool.Status.IPAddresses).To(HaveValue(Equal(v1alpha1.IPAddressesSummary{
				Total: "1021", Free: "521", Used: 500, OutOfRange: 0,
			})))
		}).Should(Succeed())
	})
})

// Restarts and replicas stop the suite's manager and run their own, so they
// run in order and bring it back afterwards.
var _ = Describe("Allocating across restarts and replicas", Ordered, func() {
	BeforeAll(func() { stopIPAM() })
	AfterAll(func() {
		var err error
		stopIPAM, err = env.StartIPAM(ctx, ipamOptions())
		Expect(err).NotTo(HaveOccurred())
	})

	It("never hands out an address again after the manager restarts", func() {
		ns := newNamespace()
		stop, err := env.StartIPAM(ctx, ipamOptions())
		Expect(err).NotTo(HaveOccurred())
		createPool(ns, "pool", poolSpec(24, "", "10.5.0.0/24"))
		before := createClaimsAtOnce(ns, "before", 40, 8)
		expectDistinctBound(before)
		stop()

		// Claims made while no manager runs are served by the next one,
		// which knows nothing but what the API server holds.
		after := createClaimsAtOnce(ns, "after", 40, 8)
		stop, err = env.StartIPAM(ctx, ipamOptions())
		Expect(err).NotTo(HaveOccurred())
		defer stop()
		Expect(expectDistinctBound(append(before, after...))).To(HaveLen(80))
	})

	It("never hands out an address twice with two replicas and a leader change", func() {
		ns := newNamespace()
		opts := ipamOptions()
		opts.LeaderElect, opts.LeaderElectionNamespace = true, "default"
		stopFirst, err := env.StartIPAM(ctx, opts)
		Expect(err).NotTo(HaveOccurred())
		webhookPort := opts.WebhookPort
		opts.WebhookPort = 0 // envtest points the webhooks at one port, the first replica's
		stopSecond, err := env.StartIPAM(ctx, opts)
		Expect(err).NotTo(HaveOccurred())
		defer stopSecond()
		createPool(ns, "pool", poolSpec(24, "", "10.5.1.0/24"))

		first := createClaimsAtOnce(ns, "first", 60, 8)
		stopFirst() // whichever replica led, allocation must carry on without duplicates
		// The IPAddress webhook must answer for any IPAddress to be created:
		// a third replica takes the first one's webhook port.
		opts.WebhookPort = webhookPort
		stopThird, err := env.StartIPAM(ctx, opts)
		Expect(err).NotTo(HaveOccurred())
		defer stopThird()
		second := createClaimsAtOnce(ns, "second", 60, 8)
		Expect(expectDistinctBound(append(first, second...))).To(HaveLen(120))
	})

	It("never hands out an address twice with two replicas and no leader election", func() {
		ns := newNamespace()
		opts := ipamOptions()
		stopFirst, err := env.StartIPAM(ctx, opts)
		Expect(err).NotTo(HaveOccurred())
		defer stopFirst()
		opts.WebhookPort = 0
		stopSecond, err := env.StartIPAM(ctx, opts)
		Expect(err).NotTo(HaveOccurred())
		defer stopSecond()
		// Both replicas reconcile every claim: without the records in the
		// API server, each would hand out addresses from its own memory.
		createPool(ns, "pool", poolSpec(24, "", "10.5.2.0/24"))
		claims := createClaimsAtOnce(ns, "claim", 150, 16)
		holders := expectDistinctBound(claims)
		Expect(holders).To(HaveLen(150))
		expectRecorded(ns, holders)
	})

	It("records on upgrade the addresses handed out before records existed", func() {
		ns := newNamespace()
		stop, err := env.StartIPAM(ctx, ipamOptions())
		Expect(err).NotTo(HaveOccurred())
		createPool(ns, "pool", poolSpec(24, "", "10.5.3.0/24"))
		before := createClaimsAtOnce(ns, "before", 30, 8)
		expectDistinctBound(before)
		stop()

		// As an earlier version left them: IPAddresses without records.
		Expect(k8s.DeleteAllOf(ctx, &coordinationv1.Lease{}, client.InNamespace(testenv.AllocationNamespace),
			client.HasLabels{v1alpha1.AllocationClaimUIDLabel})).To(Succeed())
		stop, err = env.StartIPAM(ctx, ipamOptions())
		Expect(err).NotTo(HaveOccurred())
		defer stop()
		after := createClaimsAtOnce(ns, "after", 30, 8)
		holders := expectDistinctBound(append(before, after...))
		Expect(holders).To(HaveLen(60))
		expectRecorded(ns, holders)
	})

	It("seeds a domain past the objects it cannot use, and hands out no address they may hold", func() {
		useNewVRF()
		ns := newNamespace()
		createCredentials(ns, demoToken)
		stop, err := env.StartIPAM(ctx, ipamOptions())
		Expect(err).NotTo(HaveOccurred())
		// Two pools of one VRF: one allocation domain of 18 addresses.
		for _, name := range []string{"first", "second"} {
			expectPool(createPool(ns, name, vrfSpec(v1alpha1.VRFScopeGatewaySubnets)), func(g Gomega, p v1alpha1.Pool) {
				haveCondition(g, p, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReadyReason)
			})
		}
		held := boundAddress(createClaim(ns, "held", poolKind, "first")).Spec.Address
		// IPAddresses others made, as clusterctl move does, after their
		// claims (of a paused Cluster, which nothing serves): the webhook
		// records their addresses, and their owners are live, so the
		// garbage collector leaves them.
		Expect(k8s.Create(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "moving"}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(true)}})).To(Succeed())
		stray, garbled := foreignAddress(ns, "stray", "first", "10.61.0.10"), foreignAddress(ns, "garbled", "first", "10.61.0.11")
		Expect(k8s.Create(ctx, stray)).To(Succeed())
		Expect(k8s.Create(ctx, garbled)).To(Succeed())
		DeferCleanup(func() {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, stray))).To(Succeed())
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, garbled))).To(Succeed())
		})
		stop()

		By("while no manager runs, the objects go bad, as no current writer makes them")
		corrupt(stray, `{"spec":{"claimRef":{"name":"no/such claim"}}}`)
		corrupt(garbled, `{"spec":{"address":"10.61.0.x"}}`)
		// A Lease labelled with the domain whose annotations do not read
		// as a record, under the name of the record of 10.61.0.12.
		var records coordinationv1.LeaseList
		Expect(k8s.List(ctx, &records, client.InNamespace(testenv.AllocationNamespace), client.HasLabels{v1alpha1.AllocationDomainLabel})).To(Succeed())
		i := slices.IndexFunc(records.Items, func(r coordinationv1.Lease) bool {
			return r.Annotations[v1alpha1.AllocationClaimAnnotation] == ns+"/held"
		})
		Expect(i).NotTo(Equal(-1), "no record of claim held")
		hash := records.Items[i].Labels[v1alpha1.AllocationDomainLabel]
		unreadable := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Namespace: testenv.AllocationNamespace, Name: hash + ".10.61.0.12", Labels: map[string]string{v1alpha1.AllocationDomainLabel: hash},
			Annotations: map[string]string{
				v1alpha1.AllocationDomainAnnotation:  records.Items[i].Annotations[v1alpha1.AllocationDomainAnnotation],
				v1alpha1.AllocationAddressAnnotation: "10.61.0.12",
				v1alpha1.AllocationPoolAnnotation:    "no pool",
			},
		}}
		Expect(k8s.Create(ctx, unreadable)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, unreadable))).To(Succeed()) })
		skips := []struct{ namespace, kind, name, reason, note string }{
			{ns, "IPAddress", "garbled", "InvalidAddress", `spec.address "10.61.0.x" is not an IP address`},
			{ns, "IPAddress", "stray", "UnidentifiedClaim", `spec.claimRef.name "no/such claim" is not a valid object name, so no claim can hold address 10.61.0.10: it stays held`},
			{testenv.AllocationNamespace, "Lease", unreadable.Name, "InvalidRecord", `annotation ipam.cluster.x-k8s.io/metal-vrf-pool "no pool" is not a pool`},
		}
		before := make([]float64, len(skips))
		for i, skip := range skips {
			before[i] = seedSkipped(skip.kind, skip.reason)
		}

		By("a new leader seeds the domain and both pools hand out every address no object holds")
		stop, err = env.StartIPAM(ctx, ipamOptions())
		Expect(err).NotTo(HaveOccurred())
		defer stop()
		// Claim garbled lives (paused): the record the webhook wrote for it
		// is kept, though its IPAddress no longer reads.
		holders := map[string]string{held: "claim held", "10.61.0.10": "IPAddress stray", "10.61.0.11": "the record of claim garbled", "10.61.0.12": "the unreadable record"}
		var claims []*ipamv1.IPAddressClaim
		for i := range 18 - len(holders) {
			claims = append(claims, createClaim(ns, fmt.Sprintf("after-%d", i), poolKind, []string{"first", "second"}[i%2]))
		}
		for _, claim := range claims {
			address := boundAddress(claim).Spec.Address
			Expect(holders).NotTo(HaveKey(address), "%s handed out to %s, and held by %s", address, claim.Name, holders[address])
			holders[address] = claim.Name
		}
		extra := createClaim(ns, "extra", poolKind, "second")
		Eventually(readyCondition).WithArguments(extra).Should(HaveField("Reason", ipamv1.IPAddressClaimReadyPoolExhaustedReason))

		By("each object passed by has a Warning event naming the field and the value, and is counted")
		for i, skip := range skips {
			Eventually(func(g Gomega) {
				var list eventsv1.EventList
				g.Expect(k8s.List(ctx, &list, client.InNamespace(skip.namespace))).To(Succeed())
				g.Expect(list.Items).To(ContainElement(And(HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", skip.reason),
					HaveField("Regarding.Kind", skip.kind), HaveField("Regarding.Name", skip.name), HaveField("Note", ContainSubstring(skip.note)))))
			}).Should(Succeed(), "%s %s", skip.kind, skip.name)
			Expect(seedSkipped(skip.kind, skip.reason)).To(BeNumerically(">", before[i]), "%s %s", skip.kind, skip.name)
		}
	})
})

// foreignAddress creates a claim of Cluster "moving" on the namespace's pool
// and returns (not created) an IPAddress for it, as clusterctl move makes
// one: owned by the claim, which move creates first.
func foreignAddress(ns, name, pool, address string) *ipamv1.IPAddress {
	GinkgoHelper()
	claim := newClaim(ns, name, poolKind, pool)
	claim.Spec.ClusterName = "moving"
	Expect(k8s.Create(ctx, claim)).To(Succeed())
	return &ipamv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: "moving"}, OwnerReferences: []metav1.OwnerReference{
			{APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: name, UID: claim.UID, Controller: ptr.To(true)},
		}},
		Spec: ipamv1.IPAddressSpec{
			ClaimRef: ipamv1.IPAddressClaimReference{Name: name},
			PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: poolKind, Name: pool},
			Address:  address, Prefix: ptr.To[int32](28),
		},
	}
}

// corrupt merges patch into an IPAddress through API version v1beta1,
// whose schema checks no name's format, and which no webhook sees: how an
// object that today's writers would be refused can still be stored.
func corrupt(address *ipamv1.IPAddress, patch string) {
	GinkgoHelper()
	old := &unstructured.Unstructured{}
	old.SetGroupVersionKind(schema.GroupVersionKind{Group: ipamv1.GroupVersion.Group, Version: "v1beta1", Kind: "IPAddress"})
	old.SetNamespace(address.Namespace)
	old.SetName(address.Name)
	Expect(k8s.Patch(ctx, old, client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
}

// seedSkipped reads the count of objects of kind seeding passed by for
// reason.
func seedSkipped(kind, reason string) float64 {
	GinkgoHelper()
	return counterSum("metal_vrf_ipam_seed_skipped_objects_total", func(labels map[string]string) bool {
		return labels["kind"] == kind && labels["reason"] == reason
	})
}

// expectRecorded checks that every address of holders has its allocation
// record, naming the claim that holds it, and that the namespace's claims
// have no other record.
func expectRecorded(ns string, holders map[string]string) {
	GinkgoHelper()
	Eventually(func() (map[string]string, error) { return env.AllocationRecords(ctx, ns) }).Should(Equal(holders))
}

// createAllAtOnce creates every claim at once, each from a goroutine of
// its own.
func createAllAtOnce(claims []*ipamv1.IPAddressClaim) {
	GinkgoHelper()
	var wg sync.WaitGroup
	for _, claim := range claims {
		wg.Go(func() {
			defer GinkgoRecover()
			Expect(k8s.Create(ctx, claim)).To(Succeed())
		})
	}
	wg.Wait()
}

// createClaimsAtOnce creates n claims on the namespace's pool "pool" from
// parallel workers and returns them.
func createClaimsAtOnce(ns, prefix string, n, workers int) []*ipamv1.IPAddressClaim {
	GinkgoHelper()
	claims := make([]*ipamv1.IPAddressClaim, n)
	for i := range claims {
		claims[i] = newClaim(ns, fmt.Sprintf("%s-%d", prefix, i), poolKind, "pool")
	}
	next := make(chan *ipamv1.IPAddressClaim)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for claim := range next {
				errs <- k8s.Create(ctx, claim)
			}
		})
	}
	for _, claim := range claims {
		next <- claim
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		Expect(err).NotTo(HaveOccurred())
	}
	return claims
}

// expectDistinctBound waits until every claim is bound, checks that no two
// share an address, and returns the addresses with the claims holding them.
func expectDistinctBound(claims []*ipamv1.IPAddressClaim) map[string]string {
	GinkgoHelper()
	holders := map[string]string{}
	for _, claim := range claims {
		address := boundAddress(claim).Spec.Address
		Expect(holders).NotTo(HaveKey(address), "%s handed out to %s and %s", address, holders[address], claim.Name)
		holders[address] = claim.Name
	}
	return holders
}
