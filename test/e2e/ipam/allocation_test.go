package ipam

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/pkg/ipamutil"

	cappv1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

const poolKind = v1alpha1.MetalVRFIPPoolKind

var _ = Describe("Allocating addresses from a MetalVRFIPPool", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("hands out the lowest free addresses first, skipping the network address and the gateway", func() {
		createPool(ns, "pool", poolSpec(24, "10.0.0.1", "10.0.0.0/24"))
		want := []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}
		for i, ip := range want {
			claim := createClaim(ns, fmt.Sprintf("claim-%d", i), poolKind, "pool")
			address := boundAddress(claim) // one at a time, so the order is defined
			Expect(address.Spec.Address).To(Equal(ip))
			Expect(address.Spec.Prefix).To(Equal(ptr.To[int32](24)))
			Expect(address.Spec.Gateway).To(Equal("10.0.0.1"))
			Expect(address.Spec.ClaimRef.Name).To(Equal(claim.Name))
			Expect(address.Spec.PoolRef).To(Equal(claim.Spec.PoolRef))
			Expect(metav1.IsControlledBy(address, claim)).To(BeTrue(), "the claim controls its IPAddress")
			Expect(address.OwnerReferences).To(ContainElement(SatisfyAll(
				HaveField("Kind", poolKind), HaveField("Name", "pool"),
				HaveField("Controller", HaveValue(BeFalse())), HaveField("BlockOwnerDeletion", HaveValue(BeTrue())),
			)), "the pool owns its IPAddresses too")
			Expect(controllerutil.ContainsFinalizer(address, "ipam.cluster.x-k8s.io/ProtectAddress")).To(BeTrue())
			Expect(claim.Finalizers).To(BeEmpty(), "a claim's release hangs on its IPAddress's finalizer")
			cond := readyCondition(claim)
			Expect(cond).NotTo(BeNil())
			Expect(cond.Status).To(Equal(metav1.ConditionTrue))
			Expect(cond.Message).To(ContainSubstring(ip))
		}
	})

	It("never hands out the network and broadcast addresses unless asked to", func() {
		createPool(ns, "small", poolSpec(30, "", "10.0.1.0/30"))
		spec := poolSpec(30, "", "10.0.2.0/30")
		spec.AllocateReservedIPAddresses = true
		createPool(ns, "all", spec)

		var small, all []string
		for i := range 4 {
			all = append(all, boundAddress(createClaim(ns, fmt.Sprintf("all-%d", i), poolKind, "all")).Spec.Address)
		}
		for i := range 2 {
			small = append(small, boundAddress(createClaim(ns, fmt.Sprintf("small-%d", i), poolKind, "small")).Spec.Address)
		}
		Expect(all).To(Equal([]string{"10.0.2.0", "10.0.2.1", "10.0.2.2", "10.0.2.3"}))
		Expect(small).To(Equal([]string{"10.0.1.1", "10.0.1.2"}))

		third := createClaim(ns, "small-2", poolKind, "small")
		Eventually(func() string { return reasonOf(third) }).Should(Equal(ipamv1.IPAddressClaimReadyPoolExhaustedReason))
	})

	It("skips excluded addresses", func() {
		spec := poolSpec(24, "10.0.3.1", "10.0.3.10-10.0.3.14")
		spec.ExcludedAddresses = []string{"10.0.3.10", "10.0.3.12/31"}
		createPool(ns, "pool", spec)
		var got []string
		for i := range 2 {
			got = append(got, boundAddress(createClaim(ns, fmt.Sprintf("c-%d", i), poolKind, "pool")).Spec.Address)
		}
		Expect(got).To(Equal([]string{"10.0.3.11", "10.0.3.14"}))
	})

	It("serves IPv6, skipping the subnet-router anycast address and the gateway", func() {
		createPool(ns, "v6", poolSpec(64, "fd00:1::1", "fd00:1::/64"))
		first := boundAddress(createClaim(ns, "a", poolKind, "v6"))
		second := boundAddress(createClaim(ns, "b", poolKind, "v6"))
		Expect(first.Spec.Address).To(Equal("fd00:1::2"))
		Expect(second.Spec.Address).To(Equal("fd00:1::3"))
		Expect(first.Spec.Prefix).To(Equal(ptr.To[int32](64)))
		Expect(first.Spec.Gateway).To(Equal("fd00:1::1"))

		pool := &v1alpha1.MetalVRFIPPool{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "v6"}, pool)).To(Succeed())
			g.Expect(pool.Status.IPAddresses).NotTo(BeNil())
			g.Expect(pool.Status.IPAddresses.Used).To(BeEquivalentTo(2))
		}).Should(Succeed())
		// 2^64 addresses, less the anycast address and the gateway: beyond int64.
		Expect(pool.Status.IPAddresses.Total).To(Equal("18446744073709551614"))
		Expect(pool.Status.IPAddresses.Free).To(Equal("18446744073709551612"))
	})

	It("reports exhaustion on the claim and serves it as soon as an address is released, without retrying in a loop", func() {
		createPool(ns, "pair", poolSpec(24, "", "10.0.4.10-10.0.4.11"))
		first := createClaim(ns, "first", poolKind, "pair")
		boundAddress(first)
		boundAddress(createClaim(ns, "second", poolKind, "pair"))

		exhaustedBefore := allocationOutcomes("exhausted")
		waiting := createClaim(ns, "waiting", poolKind, "pair")
		Eventually(func() string { return reasonOf(waiting) }).Should(Equal(ipamv1.IPAddressClaimReadyPoolExhaustedReason))
		Expect(readyCondition(waiting).Message).To(ContainSubstring(`MetalVRFIPPool "pair" has no free address`))

		// With no wake-up, a waiting claim is not reconciled again: a claim
		// stuck in a retry loop would keep counting here.
		Consistently(func() float64 { return allocationOutcomes("exhausted") - exhaustedBefore }, "3s", "100ms").
			Should(BeNumerically("<=", 3))

		deleteAndWait(first)
		Expect(boundAddress(waiting).Spec.Address).To(Equal("10.0.4.10"))
		Expect(readyCondition(waiting).Status).To(Equal(metav1.ConditionTrue))
	})

	It("releases the address when its claim is deleted and hands it out again", func() {
		createPool(ns, "pool", poolSpec(24, "", "10.0.5.0/24"))
		a := createClaim(ns, "a", poolKind, "pool")
		addressA := boundAddress(a)
		boundAddress(createClaim(ns, "b", poolKind, "pool"))

		deleteAndWait(a)
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(addressA), &ipamv1.IPAddress{})).NotTo(Succeed(), "the IPAddress goes with its claim")
		c := createClaim(ns, "c", poolKind, "pool")
		Expect(boundAddress(c).Spec.Address).To(Equal(addressA.Spec.Address), "the lowest free address is the released one")
	})

	// Under Kubernetes' garbage collector (the suite runs one): a foreground
	// deletion waits for the claim's dependents, its IPAddress among them,
	// and an orphaning one strips their owner references; either way the
	// claim goes only once the collector removes its finalizer, and the
	// address must be released and handed out again, its record gone.
	It("releases a claim deleted in the foreground or orphaning its dependents, and the claim goes", func() {
		createPool(ns, "gc", poolSpec(24, "", "10.0.15.0/24"))
		for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan} {
			claim := createClaim(ns, "gc-"+strings.ToLower(string(policy)), poolKind, "gc")
			address := boundAddress(claim)
			Expect(k8s.Delete(ctx, claim, client.PropagationPolicy(policy))).To(Succeed())
			Eventually(func(g Gomega) {
				err := k8s.Get(ctx, client.ObjectKeyFromObject(claim), &ipamv1.IPAddressClaim{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the claim deleted with policy %s is still there: %v", policy, err)
				err = k8s.Get(ctx, client.ObjectKeyFromObject(address), &ipamv1.IPAddress{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the IPAddress of the claim deleted with policy %s is still there: %v", policy, err)
				records, err := env.AllocationRecords(ctx, ns)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(records).NotTo(HaveKey(address.Spec.Address), "the address of the claim deleted with policy %s stays recorded", policy)
			}).Should(Succeed())
			// The address is free again: the lowest free one goes to the next claim.
			Expect(boundAddress(createClaim(ns, "after-"+claim.Name, poolKind, "gc")).Spec.Address).To(Equal(address.Spec.Address))
		}
	})

	// Without leader election, a replica may create a claim's IPAddress
	// while the other releases the claim and lets it go: the IPAddress
	// then outlives its claim, and no event of its own says so.
	It("releases an IPAddress whose claim goes after the IPAddress was created", func() {
		createPool(ns, "raced", poolSpec(24, "", "10.0.16.0/24"))
		// The claim's Cluster is paused: the claim handler leaves it alone,
		// as the replica that lost the race would.
		cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held"}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(true)}}
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		claim := newClaim(ns, "raced", poolKind, "raced")
		claim.Spec.ClusterName = cluster.Name
		Expect(k8s.Create(ctx, claim)).To(Succeed())
		address := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim.Name,
				Finalizers: []string{ipamutil.ProtectAddressFinalizer},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: claim.Name, UID: claim.UID,
				}}},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: claim.Name},
				PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: poolKind, Name: "raced"},
				Address:  "10.0.16.7", Prefix: ptr.To[int32](24),
			},
		}
		Expect(k8s.Create(ctx, address)).To(Succeed())
		Consistently(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(address), &ipamv1.IPAddress{}) }, "2s").
			Should(Succeed(), "the IPAddress of a live claim is kept")

		// The other replica released the claim and let it go.
		Expect(k8s.Delete(ctx, claim)).To(Succeed())
		Expect(client.IgnoreNotFound(k8s.Patch(ctx, claim, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(address), &ipamv1.IPAddress{}))
		}).Should(BeTrue(), "the IPAddress outlived its claim")
		Eventually(func() (map[string]string, error) { return env.AllocationRecords(ctx, ns) }).
			ShouldNot(HaveKey("10.0.16.7"), "the address stays recorded")
	})

	It("serves a claim that names a pool created after it", func() {
		claim := createClaim(ns, "early", poolKind, "late")
		Eventually(func() string { return reasonOf(claim) }).Should(Equal(ipamv1.IPAddressClaimReadyPoolNotReadyReason))
		createPool(ns, "late", poolSpec(24, "", "10.0.6.0/24"))
		Expect(boundAddress(claim).Spec.Address).To(Equal("10.0.6.1"))
	})

	It("waits while the claim's Cluster is paused and serves it once unpaused", func() {
		createPool(ns, "pool", poolSpec(24, "", "10.0.7.0/24"))
		cluster := &clusterv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "paused"},
			Spec:       clusterv1.ClusterSpec{Paused: ptr.To(true)},
		}
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		claim := newClaim(ns, "claim", poolKind, "pool")
		claim.Spec.ClusterName = cluster.Name
		Expect(k8s.Create(ctx, claim)).To(Succeed())

		Consistently(func() string {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
			return claim.Status.AddressRef.Name
		}, "2s", "100ms").Should(BeEmpty())

		patch := client.MergeFrom(cluster.DeepCopy())
		cluster.Spec.Paused = ptr.To(false)
		Expect(k8s.Patch(ctx, cluster, patch)).To(Succeed())
		Expect(boundAddress(claim).Spec.Address).To(Equal("10.0.7.1"))
	})

	It("waits while the pool is paused", func() {
		pool := createPool(ns, "pool", poolSpec(24, "", "10.0.8.0/24"))
		patch := client.MergeFrom(pool.DeepCopy())
		pool.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
		Expect(k8s.Patch(ctx, pool, patch)).To(Succeed())
		// The provider has seen the pause once the pool says so; a claim
		// created before that may still be served.
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
			g.Expect(conditions.IsTrue(pool, clusterv1.PausedCondition)).To(BeTrue())
		}).Should(Succeed())

		claim := createClaim(ns, "claim", poolKind, "pool")
		Consistently(func() string {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
			return claim.Status.AddressRef.Name
		}, "2s", "100ms").Should(BeEmpty())

		patch = client.MergeFrom(pool.DeepCopy())
		delete(pool.Annotations, clusterv1.PausedAnnotation)
		Expect(k8s.Patch(ctx, pool, patch)).To(Succeed())
		Expect(boundAddress(claim).Spec.Address).To(Equal("10.0.8.1"))
	})

	It("skips a claim whose Cluster does not exist, and still releases it on deletion", func() {
		createPool(ns, "pool", poolSpec(24, "", "10.0.9.0/24"))
		bound := createClaim(ns, "bound", poolKind, "pool")
		boundAddress(bound)

		orphan := newClaim(ns, "orphan", poolKind, "pool")
		orphan.Spec.ClusterName = "no-such-cluster"
		Expect(k8s.Create(ctx, orphan)).To(Succeed())
		Consistently(func() string {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(orphan), orphan)).To(Succeed())
			return orphan.Status.AddressRef.Name
		}, "2s", "100ms").Should(BeEmpty())

		// A claim bound before its Cluster went away is released all the same.
		patch := client.MergeFrom(bound.DeepCopy())
		bound.Labels = map[string]string{clusterv1.ClusterNameLabel: "gone"}
		Expect(k8s.Patch(ctx, bound, patch)).To(Succeed())
		deleteAndWait(bound)
		deleteAndWait(orphan)
	})

	It("hands out the pool's DNS servers, or its subnet's, with each address", func() {
		createPool(ns, "pool", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.0.12.0/24"}, Prefix: ptr.To[int32](24), Gateway: "10.0.12.1",
			ExcludedAddresses: []string{"10.0.12.2-10.0.12.99"},
			DNSServers:        []string{"10.0.12.53", "fd00:12::53"},
		})
		address := boundAddress(createClaim(ns, "claim", poolKind, "pool"))
		Expect(address.Annotations).To(HaveKeyWithValue(v1alpha1.DNSServersAnnotation, "10.0.12.53,fd00:12::53"))
		Expect(v1alpha1.DNSServersAnnotation).To(Equal(cappv1.DNSServersAnnotation), "the annotation CAPP reads")

		createPool(ns, "subnets", v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{"10.0.13.0/24"}, Prefix: ptr.To[int32](24),
			DNSServers:       []string{"10.0.13.53"},
			SubnetDNSServers: []v1alpha1.SubnetDNSServers{{Subnet: "10.0.13.0/28", DNSServers: []string{"10.0.13.1"}}},
		})
		address = boundAddress(createClaim(ns, "in-subnet", poolKind, "subnets"))
		Expect(address.Spec.Address).To(Equal("10.0.13.1"))
		Expect(address.Annotations).To(HaveKeyWithValue(v1alpha1.DNSServersAnnotation, "10.0.13.1"))
	})

	It("hands out the addresses of several subnets, each with its own prefix, gateway and DNS servers", func() {
		pool := createPool(ns, "pool", v1alpha1.MetalVRFIPPoolSpec{
			DNSServers: []string{"10.0.16.53"},
			Subnets: []v1alpha1.Subnet{
				// A /30 with a gateway has one address to hand out.
				{CIDR: "10.0.14.0/30", Gateway: "10.0.14.1", DNSServers: []string{"10.0.14.53"}},
				{CIDR: "10.0.15.0/24", Addresses: []string{"10.0.15.10-10.0.15.20"}, Gateway: "10.0.15.1", DNSServers: []string{"10.0.15.53", "10.0.15.54"}},
				{CIDR: "10.0.16.0/31"},
			},
		})
		first := boundAddress(createClaim(ns, "first", poolKind, "pool"))
		Expect(first.Spec.Address).To(Equal("10.0.14.2"))
		Expect(first.Spec.Prefix).To(Equal(ptr.To[int32](30)))
		Expect(first.Spec.Gateway).To(Equal("10.0.14.1"))
		Expect(first.Annotations).To(HaveKeyWithValue(v1alpha1.DNSServersAnnotation, "10.0.14.53"))

		second := boundAddress(createClaim(ns, "second", poolKind, "pool")) // the first subnet is full
		Expect(second.Spec.Address).To(Equal("10.0.15.10"))
		Expect(second.Spec.Prefix).To(Equal(ptr.To[int32](24)))
		Expect(second.Spec.Gateway).To(Equal("10.0.15.1"))
		Expect(second.Annotations).To(HaveKeyWithValue(v1alpha1.DNSServersAnnotation, "10.0.15.53,10.0.15.54"))

		// 1 of the /30, 11 of the range, 2 of the /31 (no reserved addresses there).
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
			g.Expect(pool.Status.IPAddresses).To(HaveValue(Equal(v1alpha1.IPAddressesSummary{Total: "14", Free: "12", Used: 2})))
		}).Should(Succeed())

		// A subnet without DNS servers of its own gets the pool's.
		requested := newClaim(ns, "requested", poolKind, "pool")
		requested.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: "10.0.16.1"}
		Expect(k8s.Create(ctx, requested)).To(Succeed())
		third := boundAddress(requested)
		Expect(third.Spec.Prefix).To(Equal(ptr.To[int32](31)))
		Expect(third.Spec.Gateway).To(BeEmpty())
		Expect(third.Annotations).To(HaveKeyWithValue(v1alpha1.DNSServersAnnotation, "10.0.16.53"))

		gateway := newClaim(ns, "gateway", poolKind, "pool")
		gateway.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: "10.0.15.1"}
		Expect(k8s.Create(ctx, gateway)).To(Succeed())
		Eventually(func() string { return ptr.Deref(readyCondition(gateway), metav1.Condition{}).Message }).Should(
			ContainSubstring("requested address 10.0.15.1 is the gateway of subnet 10.0.15.0/24 (spec.subnets[1].gateway)"))
	})

	It("hands a pre-allocated address to its owner's claims only", func() {
		spec := poolSpec(29, "10.0.14.1", "10.0.14.0/29")
		spec.PreAllocations = []v1alpha1.PreAllocation{{Machine: "cp-0", Address: "10.0.14.3"}, {HardwareReservation: "hr-1", Address: "10.0.14.5"}}
		createPool(ns, "pool", spec)
		var got []string
		for _, name := range []string{"a", "b", "c"} {
			got = append(got, boundAddress(createClaim(ns, name, poolKind, "pool")).Spec.Address)
		}
		Expect(got).To(Equal([]string{"10.0.14.2", "10.0.14.4", "10.0.14.6"}), "never a pre-allocated address")
		exhausted := createClaim(ns, "d", poolKind, "pool")
		Eventually(func() string { return reasonOf(exhausted) }).Should(Equal(ipamv1.IPAddressClaimReadyPoolExhaustedReason))

		thief := newClaim(ns, "thief", poolKind, "pool")
		thief.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: "10.0.14.3"}
		Expect(k8s.Create(ctx, thief)).To(Succeed())
		Eventually(func() string { return ptr.Deref(readyCondition(thief), metav1.Condition{}).Message }).Should(ContainSubstring(
			`requested address 10.0.14.3 is pre-allocated to Machine cp-0 (spec.preAllocations[0]) in MetalVRFIPPool "pool"`))

		owned := func(name string, annotations map[string]string) *ipamv1.IPAddressClaim {
			claim := newClaim(ns, name, poolKind, "pool")
			claim.Annotations = annotations
			Expect(k8s.Create(ctx, claim)).To(Succeed())
			return claim
		}
		Expect(boundAddress(owned("cp-0-claim", map[string]string{v1alpha1.MachineAnnotation: "cp-0"})).Spec.Address).To(Equal("10.0.14.3"))
		Expect(boundAddress(owned("replacement", map[string]string{
			v1alpha1.MachineAnnotation: "w-7f2", v1alpha1.HardwareReservationAnnotation: "hr-1",
		})).Spec.Address).To(Equal("10.0.14.5"))
		Expect(v1alpha1.MachineAnnotation).To(Equal(cappv1.ClaimMachineAnnotation), "the annotation CAPP writes")
		Expect(v1alpha1.HardwareReservationAnnotation).To(Equal(cappv1.ClaimHardwareReservationAnnotation), "the annotation CAPP writes")
	})

	It("keeps a pre-allocated address from another owner's claim at every door: a written IPAddress, an adopted one", func() {
		spec := poolSpec(29, "10.0.15.1", "10.0.15.0/29")
		spec.PreAllocations = []v1alpha1.PreAllocation{{Machine: "cp-0", Address: "10.0.15.3"}, {Machine: "cp-1", Address: "10.0.15.4"}}
		createPool(ns, "pool", spec)
		written := func(claim *ipamv1.IPAddressClaim, address string) *ipamv1.IPAddress {
			return &ipamv1.IPAddress{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim.Name, OwnerReferences: []metav1.OwnerReference{
					{APIVersion: ipamv1.GroupVersion.String(), Kind: "IPAddressClaim", Name: claim.Name, UID: claim.UID},
				}},
				Spec: ipamv1.IPAddressSpec{
					ClaimRef: ipamv1.IPAddressClaimReference{Name: claim.Name},
					PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: poolKind, Name: "pool"},
					Address:  address, Prefix: ptr.To[int32](29), Gateway: "10.0.15.1",
				},
			}
		}
		const pinned = `address 10.0.15.3 is pre-allocated to Machine cp-0 (spec.preAllocations[0]) in MetalVRFIPPool "pool"`

		By("an IPAddress written for a claim of another owner is refused, naming spec.address")
		paused := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "paused"}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(true)}}
		Expect(k8s.Create(ctx, paused)).To(Succeed())
		other := newClaim(ns, "other", poolKind, "pool")
		other.Labels = map[string]string{clusterv1.ClusterNameLabel: paused.Name}
		other.Annotations = map[string]string{v1alpha1.MachineAnnotation: "w-1"}
		Expect(k8s.Create(ctx, other)).To(Succeed())
		err := k8s.Create(ctx, written(other, "10.0.15.3"))
		Expect(err).To(MatchError(And(ContainSubstring("spec.address"), ContainSubstring(pinned))))

		By("the owner's claim may have it written")
		owner := newClaim(ns, "cp-0-claim", poolKind, "pool")
		owner.Labels = map[string]string{clusterv1.ClusterNameLabel: paused.Name}
		owner.Annotations = map[string]string{v1alpha1.MachineAnnotation: "cp-0"}
		Expect(k8s.Create(ctx, owner)).To(Succeed())
		Expect(k8s.Create(ctx, written(owner, "10.0.15.3"))).To(Succeed())

		By("an IPAddress that got past the webhook (its claim's owner changed since) is not adopted by a claim of another owner")
		changed := newClaim(ns, "changed", poolKind, "pool")
		changed.Labels = map[string]string{clusterv1.ClusterNameLabel: paused.Name}
		changed.Annotations = map[string]string{v1alpha1.MachineAnnotation: "cp-1"}
		Expect(k8s.Create(ctx, changed)).To(Succeed())
		Expect(k8s.Create(ctx, written(changed, "10.0.15.4"))).To(Succeed())
		changed.Annotations[v1alpha1.MachineAnnotation] = "w-2"
		Expect(k8s.Update(ctx, changed)).To(Succeed())
		paused.Spec.Paused = ptr.To(false)
		Expect(k8s.Update(ctx, paused)).To(Succeed())
		Eventually(func() string { return ptr.Deref(readyCondition(changed), metav1.Condition{}).Message }).Should(ContainSubstring(
			`address 10.0.15.4 is pre-allocated to Machine cp-1 (spec.preAllocations[1]) in MetalVRFIPPool "pool"`))
		Expect(boundAddress(owner).Spec.Address).To(Equal("10.0.15.3"), "the owner's claim is bound to its pinned address")
	})

	It("serves a claim once its Cluster appears, and gives it no finalizer", func() {
		createPool(ns, "pool", poolSpec(24, "", "10.0.10.0/24"))
		claim := newClaim(ns, "claim", poolKind, "pool")
		claim.Spec.ClusterName = "later"
		Expect(k8s.Create(ctx, claim)).To(Succeed())

		Expect(k8s.Create(ctx, &clusterv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "later"},
			Spec:       clusterv1.ClusterSpec{Paused: ptr.To(false)},
		})).To(Succeed())
		Expect(boundAddress(claim).Spec.Address).To(Equal("10.0.10.1"))
		Expect(claim.Finalizers).To(BeEmpty(), "the release hangs on the IPAddress's finalizer")
	})

	It("binds a claim in one write that carries both its address and its Ready condition, and writes nothing more", func() {
		createPool(ns, "pool", poolSpec(24, "", "10.0.11.0/24"))
		watcher, err := client.NewWithWatch(env.Config, client.Options{Scheme: k8s.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		claims, err := watcher.Watch(ctx, &ipamv1.IPAddressClaimList{}, client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		defer claims.Stop()
		nextVersion := func() *ipamv1.IPAddressClaim {
			GinkgoHelper()
			var e watch.Event
			Eventually(claims.ResultChan()).Should(Receive(&e))
			claim, ok := e.Object.(*ipamv1.IPAddressClaim)
			Expect(ok).To(BeTrue(), "watch event %s: %v", e.Type, e.Object)
			return claim
		}

		createClaim(ns, "claim", poolKind, "pool")
		Expect(nextVersion().Status.AddressRef.Name).To(BeEmpty(), "the claim as created")
		bound := nextVersion()
		Expect(bound.Status.AddressRef.Name).To(Equal("claim"), "the first write after the creation binds the claim")
		Expect(conditions.IsTrue(bound, ipamv1.IPAddressClaimReadyCondition)).To(BeTrue(), "the same write sets Ready")
		Consistently(claims.ResultChan(), "2s").ShouldNot(Receive(), "nothing writes a bound claim again")
	})

	It("serves one GlobalMetalVRFIPPool to claims of several namespaces without duplicates", func() {
		name := "global-" + ns
		createGlobalPool(name, poolSpec(24, "10.1.0.1", "10.1.0.0/24"))
		other := newNamespace()
		seen := map[string]string{}
		for i := range 3 {
			for _, namespace := range []string{ns, other} {
				claim := createClaim(namespace, fmt.Sprintf("c-%d", i), v1alpha1.GlobalMetalVRFIPPoolKind, name)
				address := boundAddress(claim)
				Expect(seen).NotTo(HaveKey(address.Spec.Address), "address handed out twice")
				seen[address.Spec.Address] = namespace + "/" + claim.Name
				Expect(address.Spec.Gateway).To(Equal("10.1.0.1"))
			}
		}
		Expect(seen).To(HaveLen(6))
		global := &v1alpha1.GlobalMetalVRFIPPool{}
		Eventually(func() int64 {
			Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, global)).To(Succeed())
			if global.Status.IPAddresses == nil {
				return -1
			}
			return global.Status.IPAddresses.Used
		}).Should(BeEquivalentTo(6))
	})
})

// reasonOf returns the reason of the claim's Ready condition, or "".
func reasonOf(claim *ipamv1.IPAddressClaim) string {
	if cond := readyCondition(claim); cond != nil {
		return cond.Reason
	}
	return ""
}
