package ipam

import (
	"fmt"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
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
})

// expectRecorded checks that every address of holders has its allocation
// record, naming the claim that holds it, and that the namespace's claims
// have no other record.
func expectRecorded(ns string, holders map[string]string) {
	GinkgoHelper()
	Eventually(func() (map[string]string, error) { return env.AllocationRecords(ctx, ns) }).Should(Equal(holders))
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
