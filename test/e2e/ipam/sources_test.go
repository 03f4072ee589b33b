package ipam

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cappv1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// The example seed's IDs: a VRF in da with ranges 10.60.0.0/22 and
// 10.61.0.0/24, and two subnets served by Metal Gateways, 10.60.1.0/29
// (gateway 10.60.1.1) and 10.61.0.0/28 (gateway 10.61.0.1).
const (
	demoToken   = simtest.APIKey
	demoProject = simtest.Project
	demoRes1    = simtest.NodesReservation
	demoRes2    = simtest.LBReservation
)

// demoVRF is the ID the example's VRF has in the current test. Every test
// gets a VRF of its own: pools naming one VRF share its addresses, so pools
// left by an earlier test would hold them.
var (
	demoVRF    string
	vrfsIssued int
)

// metalServer serves the Metal API from a simulator that a test can replace
// with a differently seeded one: how a change made on the Metal side (a VRF
// range or a gateway removed), which the API offers no call for, is played.
// Each test has a server of its own, so the pools of earlier tests, which
// keep reading their sources, do not reach the current test's simulator.
type metalServer struct {
	// URL is the base URL of this test's simulator: the suite's listener
	// (the Metal API endpoint the IPAM manager allows) and a path of its own.
	URL    string
	prefix string
	sim    atomic.Pointer[sim.Server]
}

var metalAPI *metalServer

// metalAPIs route the suite's listener's requests to the tests' simulators
// by the first segment of their path.
var (
	metalAPIs       sync.Map // prefix → *metalServer
	metalAPIsServed atomic.Int64
)

// serveMetalAPIs is the handler of the suite's listener.
func serveMetalAPIs(w http.ResponseWriter, r *http.Request) {
	prefix, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	m, ok := metalAPIs.Load("/" + prefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	http.StripPrefix("/"+prefix, m.(*metalServer).sim.Load()).ServeHTTP(w, r)
}

func startMetalAPI() *metalServer {
	m := &metalServer{prefix: fmt.Sprintf("/t%d", metalAPIsServed.Add(1))}
	m.URL = metalListener.URL + m.prefix
	m.sim.Store(sim.New(sim.Options{}))
	metalAPIs.Store(m.prefix, m)
	return m
}

// Close stops serving this test's simulator.
func (m *metalServer) Close() { metalAPIs.Delete(m.prefix) }

// reset serves a fresh simulator seeded with the example seed, edited by
// edit when not nil.
func (m *metalServer) reset(edit func(*sim.SeedFile)) {
	GinkgoHelper()
	s, err := simtest.New(sim.Options{}, func(seed *sim.SeedFile) {
		p := &seed.Projects[0]
		p.VRFs[0].ID = demoVRF
		for i := range p.IPReservations {
			p.IPReservations[i].VRF = demoVRF
		}
		if edit != nil {
			edit(seed)
		}
	})
	Expect(err).NotTo(HaveOccurred())
	m.sim.Store(s)
}

// useNewVRF gives the current test a VRF of its own (demoVRF), served by a
// simulator of its own (metalAPI) seeded with the example seed.
func useNewVRF() {
	GinkgoHelper()
	vrfsIssued++
	demoVRF = fmt.Sprintf("d5a2c0de-0000-4000-8000-%012d", 0xf000+vrfsIssued)
	metalAPI = startMetalAPI()
	DeferCleanup(metalAPI.Close)
	metalAPI.reset(nil)
}

// credentialsSecret is the name of the credentials Secret of the VRF pools.
const credentialsSecret = "metal"

func createCredentials(ns, token string) *corev1.Secret {
	GinkgoHelper()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: credentialsSecret},
		StringData: map[string]string{"apiKey": token, "baseURL": metalAPI.URL},
	}
	Expect(k8s.Create(ctx, secret)).To(Succeed())
	return secret
}

func vrfSpec(scope v1alpha1.VRFScope) v1alpha1.MetalVRFIPPoolSpec {
	return v1alpha1.MetalVRFIPPoolSpec{VRF: &v1alpha1.VRFSource{
		ID: demoVRF, CredentialsRef: v1alpha1.SecretReference{Name: credentialsSecret}, Scope: scope,
		ProjectID: demoProject, Metro: "da",
	}}
}

// poolCondition returns the pool's condition of type t, or nil.
func poolCondition(pool v1alpha1.Pool, t string) *metav1.Condition {
	for i, c := range pool.GetConditions() {
		if c.Type == t {
			return &pool.GetConditions()[i]
		}
	}
	return nil
}

// expectPool waits until check holds for the pool as read from the API server.
func expectPool(pool v1alpha1.Pool, check func(g Gomega, pool v1alpha1.Pool)) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
		check(g, pool)
	}).Should(Succeed())
}

func haveCondition(g Gomega, pool v1alpha1.Pool, t string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	c := poolCondition(pool, t)
	g.Expect(c).NotTo(BeNil(), "no %s condition", t)
	g.Expect(c.Status).To(Equal(status), "%s: %s", c.Reason, c.Message)
	g.Expect(c.Reason).To(Equal(reason), c.Message)
	return c
}

// subnetOf says which of the example's gateway subnets holds an address.
var gatewaySubnets = map[netip.Prefix]string{
	netip.MustParsePrefix("10.60.1.0/29"): "10.60.1.1",
	netip.MustParsePrefix("10.61.0.0/28"): "10.61.0.1",
}

// expectInGatewaySubnet checks that an address lies in a gateway subnet, is
// not its network, broadcast or gateway address, and carries the subnet's
// prefix and gateway.
func expectInGatewaySubnet(address *ipamv1.IPAddress) netip.Prefix {
	GinkgoHelper()
	ip := netip.MustParseAddr(address.Spec.Address)
	for subnet, gateway := range gatewaySubnets {
		if !subnet.Contains(ip) {
			continue
		}
		Expect(address.Spec.Address).NotTo(Equal(gateway), "the gateway was handed out")
		Expect(ip).NotTo(Equal(subnet.Addr()), "the network address was handed out")
		Expect(address.Spec.Gateway).To(Equal(gateway), "gateway of %s", ip)
		Expect(ptr.Deref(address.Spec.Prefix, 0)).To(BeEquivalentTo(subnet.Bits()), "prefix of %s", ip)
		return subnet
	}
	Fail(fmt.Sprintf("%s lies in no Metal Gateway subnet", ip))
	return netip.Prefix{}
}

var _ = Describe("Pools sourced from an Equinix Metal VRF", func() {
	var ns string
	BeforeEach(func() {
		useNewVRF()
		ns = newNamespace()
	})

	It("says which VRF gives nothing of the pool's family and scope, and serves nothing", func() {
		createCredentials(ns, demoToken)
		spec := vrfSpec(v1alpha1.VRFScopeGatewaySubnets)
		spec.VRF.IPFamily = v1alpha1.IPv6Family
		pool := createPool(ns, "vrf", spec)
		expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
			c := haveCondition(g, p, v1alpha1.SourcesResolvedCondition, metav1.ConditionFalse, v1alpha1.VRFWithoutAddressesReason)
			g.Expect(c.Message).To(Equal("VRF " + demoVRF + " gives the pool no address: it has no IPv6 IP reservation served by a Metal Gateway (spec.vrf.ipFamily, spec.vrf.scope)"))
			r := haveCondition(g, p, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.SourcesNotResolvedReason)
			g.Expect(r.Message).To(ContainSubstring(c.Message))
		})
		claim := createClaim(ns, "claim", v1alpha1.MetalVRFIPPoolKind, pool.Name)
		Eventually(func() string { return reasonOf(claim) }).Should(Equal(ipamv1.IPAddressClaimReadyPoolNotReadyReason))
		Expect(readyCondition(claim).Message).To(ContainSubstring("gives the pool no address"))
	})

	It("hands out only the Metal Gateway subnets, never a gateway, with each subnet's prefix and gateway", func() {
		createCredentials(ns, demoToken)
		pool := createPool(ns, "vrf", vrfSpec(v1alpha1.VRFScopeGatewaySubnets))
		expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
			haveCondition(g, p, v1alpha1.SourcesResolvedCondition, metav1.ConditionTrue, v1alpha1.SourcesResolvedReason)
			haveCondition(g, p, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReadyReason)
			g.Expect(p.PoolStatus().LastSyncTime).NotTo(BeNil())
			g.Expect(p.PoolStatus().IPAddresses).NotTo(BeNil())
			g.Expect(p.PoolStatus().IPAddresses.Total).To(Equal("18")) // 5 of the /29, 13 of the /28
		})
		Expect(pool.Status.Resolved).To(ConsistOf(
			v1alpha1.ResolvedAddresses{Address: "10.60.1.0/29", Prefix: ptr.To[int32](29), Gateway: "10.60.1.1", Source: "vrf/" + demoVRF + "/reservation/" + demoRes1},
			v1alpha1.ResolvedAddresses{Address: "10.61.0.0/28", Prefix: ptr.To[int32](28), Gateway: "10.61.0.1", Source: "vrf/" + demoVRF + "/reservation/" + demoRes2},
		))

		claims := make([]*ipamv1.IPAddressClaim, 18)
		for i := range claims {
			claims[i] = createClaim(ns, fmt.Sprintf("c%d", i), v1alpha1.MetalVRFIPPoolKind, pool.Name)
		}
		seen := map[string]bool{}
		perSubnet := map[netip.Prefix]int{}
		for _, claim := range claims {
			address := boundAddress(claim)
			Expect(seen).NotTo(HaveKey(address.Spec.Address), "duplicate address")
			seen[address.Spec.Address] = true
			perSubnet[expectInGatewaySubnet(address)]++
		}
		Expect(perSubnet).To(Equal(map[netip.Prefix]int{
			netip.MustParsePrefix("10.60.1.0/29"): 5, netip.MustParsePrefix("10.61.0.0/28"): 13,
		}))

		extra := createClaim(ns, "extra", v1alpha1.MetalVRFIPPoolKind, pool.Name)
		Eventually(func(g Gomega) {
			c := readyCondition(extra)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(ipamv1.IPAddressClaimReadyPoolExhaustedReason))
		}).Should(Succeed())
	})

	It("follows a change of the VRF, keeping an address the VRF no longer has as out of range", func() {
		createCredentials(ns, demoToken)
		spec := vrfSpec(v1alpha1.VRFScopeIPRanges)
		spec.Prefix = ptr.To[int32](32) // addresses outside the gateway subnets: announced over BGP
		pool := createPool(ns, "ranges", spec)
		// 1024 + 256 addresses, less network, gateway and broadcast of both gateway subnets.
		expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
			g.Expect(p.PoolStatus().IPAddresses).NotTo(BeNil())
			g.Expect(p.PoolStatus().IPAddresses.Total).To(Equal("1274"))
		})

		outside := newClaim(ns, "bgp", v1alpha1.MetalVRFIPPoolKind, pool.Name)
		outside.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: "10.61.0.200"}
		Expect(k8s.Create(ctx, outside)).To(Succeed())
		address := boundAddress(outside)
		Expect(address.Spec.Address).To(Equal("10.61.0.200"))
		Expect(ptr.Deref(address.Spec.Prefix, 0)).To(BeEquivalentTo(32))
		Expect(address.Spec.Gateway).To(BeEmpty())
		inSubnet := newClaim(ns, "node", v1alpha1.MetalVRFIPPoolKind, pool.Name)
		inSubnet.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: "10.61.0.5"}
		Expect(k8s.Create(ctx, inSubnet)).To(Succeed())
		expectInGatewaySubnet(boundAddress(inSubnet))

		By("removing the VRF's second range and its gateway subnet on the Metal side")
		metalAPI.reset(func(seed *sim.SeedFile) {
			p := &seed.Projects[0]
			p.VRFs[0].IPRanges = []string{"10.60.0.0/22"}
			p.IPReservations = p.IPReservations[:1]
			p.MetalGateways = p.MetalGateways[:1]
		})
		expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
			haveCondition(g, p, v1alpha1.SourcesResolvedCondition, metav1.ConditionTrue, v1alpha1.SourcesResolvedReason)
			g.Expect(p.PoolStatus().Resolved).To(HaveLen(2)) // the range and the /29
			g.Expect(p.PoolStatus().IPAddresses.Total).To(Equal("1021"))
			g.Expect(p.PoolStatus().IPAddresses.OutOfRange).To(BeEquivalentTo(2))
			g.Expect(p.PoolStatus().IPAddresses.Used).To(BeEquivalentTo(2))
		})
		Consistently(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(address), address)).To(Succeed())
			g.Expect(address.DeletionTimestamp).To(BeNil())
		}, "2s").Should(Succeed(), "an address the source no longer gives was revoked")
	})

	It("says clearly when the credentials are missing or wrong, without leaking the token, and recovers", func() {
		pool := createPool(ns, "creds", vrfSpec(v1alpha1.VRFScopeGatewaySubnets))
		expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
			c := haveCondition(g, p, v1alpha1.SourcesResolvedCondition, metav1.ConditionFalse, v1alpha1.CredentialsSecretNotFoundReason)
			g.Expect(c.Message).To(ContainSubstring(ns + "/" + credentialsSecret))
			haveCondition(g, p, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.SourcesNotResolvedReason)
		})

		const wrongToken = "not-the-demo-token-1234"
		secret := createCredentials(ns, wrongToken)
		expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
			c := haveCondition(g, p, v1alpha1.SourcesResolvedCondition, metav1.ConditionFalse, v1alpha1.InvalidCredentialsReason)
			g.Expect(c.Message).To(ContainSubstring("401"))
			g.Expect(c.Message).NotTo(ContainSubstring(wrongToken))
		})

		By("retrying at a bounded pace instead of in a hot loop")
		simulator := metalAPI.sim.Load()
		before := simulator.Calls(sim.OpFindVrfByID)
		time.Sleep(3 * time.Second)
		Expect(simulator.Calls(sim.OpFindVrfByID) - before).To(BeNumerically("<=", 10))

		By("fixing the Secret")
		secret.StringData = map[string]string{"apiKey": demoToken}
		Expect(k8s.Update(ctx, secret)).To(Succeed())
		expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
			haveCondition(g, p, v1alpha1.SourcesResolvedCondition, metav1.ConditionTrue, v1alpha1.SourcesResolvedReason)
			haveCondition(g, p, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReadyReason)
		})
		expectInGatewaySubnet(boundAddress(createClaim(ns, "c", v1alpha1.MetalVRFIPPoolKind, pool.Name)))
	})

	It("keeps allocating from the last resolved set through a storm of 500s", func() {
		createCredentials(ns, demoToken)
		pool := createPool(ns, "storm", vrfSpec(v1alpha1.VRFScopeGatewaySubnets))
		expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
			// CAPI's patch helper writes conditions before the rest of the
			// status: wait for both.
			haveCondition(g, p, v1alpha1.SourcesResolvedCondition, metav1.ConditionTrue, v1alpha1.SourcesResolvedReason)
			g.Expect(p.PoolStatus().Resolved).To(HaveLen(2))
		})
		resolved := pool.Status.Resolved

		metalAPI.sim.Load().FailNext(sim.OpFindVrfByID, 1_000_000, http.StatusInternalServerError, 0)
		expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
			c := haveCondition(g, p, v1alpha1.SourcesResolvedCondition, metav1.ConditionFalse, v1alpha1.MetalAPIUnavailableReason)
			g.Expect(c.Message).To(ContainSubstring("500"))
			g.Expect(c.Message).To(ContainSubstring("stale"))
			haveCondition(g, p, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReadyReason)
		})
		Expect(pool.Status.Resolved).To(Equal(resolved))
		for i := range 4 {
			expectInGatewaySubnet(boundAddress(createClaim(ns, fmt.Sprintf("c%d", i), v1alpha1.MetalVRFIPPoolKind, pool.Name)))
		}

		metalAPI.sim.Load().ClearFaults()
		expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
			haveCondition(g, p, v1alpha1.SourcesResolvedCondition, metav1.ConditionTrue, v1alpha1.SourcesResolvedReason)
		})
	})

	It("refuses to move a pool with addresses in use to another VRF", func() {
		createCredentials(ns, demoToken)
		pool := createPool(ns, "vrf", vrfSpec(v1alpha1.VRFScopeGatewaySubnets))
		address := boundAddress(createClaim(ns, "c", v1alpha1.MetalVRFIPPoolKind, pool.Name))

		// The manager writes the pool's status meanwhile: retry a conflict,
		// so what answers is the webhook.
		var err error
		Eventually(func() bool {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
			moved := pool.DeepCopy()
			moved.Spec.VRF.ID = "d5a2c0de-0000-4000-8000-00000000dead"
			err = k8s.Update(ctx, moved)
			return apierrors.IsConflict(err)
		}).Should(BeFalse())
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.vrf.id: Forbidden: cannot change while addresses of the pool are in use"))
		Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("%s (IPAddress %s/c)", address.Spec.Address, ns)))
	})

	It("never hands out one address twice from two pools on one VRF", func() {
		createCredentials(ns, demoToken)
		local := createPool(ns, "local", vrfSpec(v1alpha1.VRFScopeGatewaySubnets))
		globalSpec := vrfSpec(v1alpha1.VRFScopeGatewaySubnets)
		globalSpec.VRF.CredentialsRef.Namespace = ns
		global := createGlobalPool(ns+"-global", globalSpec)
		DeferCleanup(func() {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(global), global)).To(Succeed())
			patch := client.MergeFrom(global.DeepCopy())
			global.Annotations = map[string]string{v1alpha1.SkipDeleteValidationAnnotation: ""}
			Expect(k8s.Patch(ctx, global, patch)).To(Succeed())
			deleteAndWait(global)
		})
		for _, p := range []v1alpha1.Pool{local, global} {
			expectPool(p, func(g Gomega, p v1alpha1.Pool) {
				haveCondition(g, p, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReadyReason)
			})
		}

		// Both pools span the same 18 addresses: 9 claims on each, at once.
		var claims []*ipamv1.IPAddressClaim
		for i := range 9 {
			claims = append(claims,
				newClaim(ns, fmt.Sprintf("local-%d", i), v1alpha1.MetalVRFIPPoolKind, local.Name),
				newClaim(ns, fmt.Sprintf("global-%d", i), v1alpha1.GlobalMetalVRFIPPoolKind, global.Name))
		}
		createAllAtOnce(claims)
		seen := map[string]string{}
		for _, claim := range claims {
			address := boundAddress(claim)
			Expect(seen).NotTo(HaveKey(address.Spec.Address), "%s handed out to %s and %s", address.Spec.Address, seen[address.Spec.Address], claim.Name)
			seen[address.Spec.Address] = claim.Name
			expectInGatewaySubnet(address)
		}

		extra := createClaim(ns, "extra", v1alpha1.GlobalMetalVRFIPPoolKind, global.Name)
		Eventually(func(g Gomega) {
			c := readyCondition(extra)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(ipamv1.IPAddressClaimReadyPoolExhaustedReason))
		}).Should(Succeed())

		By("releasing an address of one pool, which the other can then hand out")
		var freed string
		for address, name := range seen {
			if strings.HasPrefix(name, "local-") {
				freed = address
				deleteAndWait(&ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
				break
			}
		}
		Expect(boundAddress(extra).Spec.Address).To(Equal(freed))
	})

	It("keeps a pool whose credentials cannot read the VRF apart from the VRF's pools, and tells it nothing of them", func() {
		createCredentials(ns, demoToken)
		owner := createPool(ns, "owner", vrfSpec(v1alpha1.VRFScopeGatewaySubnets))
		expectPool(owner, func(g Gomega, p v1alpha1.Pool) {
			haveCondition(g, p, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReadyReason)
			// Read from the simulator, not the public API: the project is
			// qualified by the endpoint (see qualifiedProject).
			endpoint, err := metal.Endpoint(metalAPI.URL)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.PoolStatus().VRF).To(Equal(&v1alpha1.ResolvedVRF{ID: demoVRF, ProjectID: demoProject + "@" + endpoint}))
		})
		held := boundAddress(createClaim(ns, "held", v1alpha1.MetalVRFIPPoolKind, "owner")).Spec.Address

		// Another tenant names the VRF's ID, with credentials of its own
		// project, and the same addresses spelled out.
		other := newNamespace()
		createCredentials(other, simtest.OtherAPIKey)
		spec := vrfSpec(v1alpha1.VRFScopeGatewaySubnets)
		spec.VRF.ProjectID = ""
		spec.Addresses, spec.Prefix, spec.Gateway = []string{"10.60.1.0/29"}, ptr.To[int32](29), "10.60.1.1"
		intruder := createPool(other, "intruder", spec)
		expectPool(intruder, func(g Gomega, p v1alpha1.Pool) {
			haveCondition(g, p, v1alpha1.SourcesResolvedCondition, metav1.ConditionFalse, v1alpha1.VRFNotFoundReason)
			g.Expect(p.PoolStatus().VRF).To(BeNil())
		})
		probe := newClaim(other, "probe", v1alpha1.MetalVRFIPPoolKind, "intruder")
		probe.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: held}
		Expect(k8s.Create(ctx, probe)).To(Succeed())
		Eventually(func() string { return reasonOf(probe) }).Should(Equal(ipamv1.IPAddressClaimReadyPoolNotReadyReason))
		// The pool's own failure is the reason: its credentials cannot read
		// the VRF.
		Expect(readyCondition(probe).Message).To(SatisfyAll(ContainSubstring(`"intruder" cannot serve claims`), ContainSubstring("VRF "+spec.VRF.ID), ContainSubstring("Not Found")))
		Expect(readyCondition(probe).Message).NotTo(ContainSubstring(ns), "a message names another namespace's objects")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(probe), probe)).To(Succeed())
		Expect(probe.Status.AddressRef.Name).To(BeEmpty())
	})
})

var _ = Describe("Pools sourced from a PacketCluster network", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("hands out the network's ipAddresses and follows a change to them", func() {
		cluster := &cappv1.PacketCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"},
			Spec: cappv1.PacketClusterSpec{ProjectID: demoProject, Networks: []cappv1.NetworkSpec{
				{Name: "nodes", IPAddresses: []string{"10.70.0.0/29"}, Assignment: cappv1.AssignmentClusterAPI},
				{Name: "storage", IPAddresses: []string{"10.80.0.0/24"}, Assignment: cappv1.AssignmentDHCP},
			}},
		}
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		pool := createPool(ns, "nodes", v1alpha1.MetalVRFIPPoolSpec{
			NetworkRef: &v1alpha1.NetworkReference{Name: "demo", Network: "nodes"},
			Prefix:     ptr.To[int32](29), Gateway: "10.70.0.1",
		})
		expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
			haveCondition(g, p, v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.ReadyReason)
			g.Expect(p.PoolStatus().IPAddresses).NotTo(BeNil())
			g.Expect(p.PoolStatus().IPAddresses.Total).To(Equal("5"))
		})
		address := boundAddress(createClaim(ns, "node-0", v1alpha1.MetalVRFIPPoolKind, pool.Name))
		Expect(address.Spec.Address).To(Equal("10.70.0.2"))
		Expect(address.Spec.Gateway).To(Equal("10.70.0.1"))
		Expect(ptr.Deref(address.Spec.Prefix, 0)).To(BeEquivalentTo(29))

		By("adding a range to the network")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)).To(Succeed())
		cluster.Spec.Networks[0].IPAddresses = append(cluster.Spec.Networks[0].IPAddresses, "10.70.1.0/30")
		Expect(k8s.Update(ctx, cluster)).To(Succeed())
		expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
			g.Expect(p.PoolStatus().Resolved).To(ContainElement(v1alpha1.ResolvedAddresses{
				Address: "10.70.1.0/30", Prefix: ptr.To[int32](30), Source: "packetcluster/demo/nodes",
			}))
			g.Expect(p.PoolStatus().IPAddresses.Total).To(Equal("7"))
		})
		requested := newClaim(ns, "node-1", v1alpha1.MetalVRFIPPoolKind, pool.Name)
		requested.Annotations = map[string]string{v1alpha1.RequestedAddressAnnotation: "10.70.1.2"}
		Expect(k8s.Create(ctx, requested)).To(Succeed())
		address = boundAddress(requested)
		Expect(ptr.Deref(address.Spec.Prefix, 0)).To(BeEquivalentTo(30))
		Expect(address.Spec.Gateway).To(BeEmpty(), "spec.gateway lies outside 10.70.1.0/30")
	})

	It("is not Ready on a network whose addresses DHCP hands out, and says why", func() {
		cluster := &cappv1.PacketCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"},
			Spec: cappv1.PacketClusterSpec{ProjectID: demoProject, Networks: []cappv1.NetworkSpec{
				{Name: "storage", IPAddresses: []string{"10.80.0.0/24"}, Assignment: cappv1.AssignmentDHCP},
			}},
		}
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		pool := createPool(ns, "storage", v1alpha1.MetalVRFIPPoolSpec{
			NetworkRef: &v1alpha1.NetworkReference{Name: "demo", Network: "storage"},
		})
		expectPool(pool, func(g Gomega, p v1alpha1.Pool) {
			c := haveCondition(g, p, v1alpha1.SourcesResolvedCondition, metav1.ConditionFalse, v1alpha1.NetworkNotClusterAPIReason)
			g.Expect(c.Message).To(ContainSubstring(`assignment "dhcp"`))
			r := haveCondition(g, p, v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.SourcesNotResolvedReason)
			g.Expect(r.Message).To(ContainSubstring("dhcp"))
		})
	})
})
