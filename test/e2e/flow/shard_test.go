package flow

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/controllers"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// shard is one Cluster and the pair of managers (IPAM and CAPP) whose
// --watch-filter is its label.
type shard struct {
	cluster, filter string
	// nodes are the addresses of the cluster's own MetalVRFIPPool.
	nodes string
	ns    string
}

// managers are the names the shard's managers write under (managedFields).
func (s shard) managers() []string { return []string{"ipam-" + s.filter, "capp-" + s.filter} }

// lbVXLAN is the simulator's LB VLAN (simtest.LBVLAN), served by the shared
// global pool.
const lbVXLAN = 1002

// TestShardedManagers runs two IPAM and two CAPP managers with two
// --watch-filter values over two Clusters, one per filter, under Cluster
// API's own (unfiltered) core manager. The Clusters share a
// GlobalMetalVRFIPPool, which carries the first shard's label: that shard's
// IPAM manager is the one allocating from it, for the claims of both
// Clusters. Each manager writes only what belongs to its shard, everything
// is served, and no address of the shared pool is held twice.
func TestShardedManagers(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(4 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	ctx := context.Background()

	metalAPI := startPlatform(t, g)
	env, err := testenv.Start(testenv.Options{CAPPCRDs: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	k8s := env.Client

	shards := []*shard{
		{cluster: "alpha", filter: "shard-a", nodes: "10.60.1.2-10.60.1.6"},
		{cluster: "beta", filter: "shard-b", nodes: "10.60.1.10-10.60.1.14"},
	}
	getenv := func(name string) string {
		return map[string]string{metal.EnvAPIKey: simtest.APIKey, metal.EnvBaseURL: metalAPI.sim.URL}[name]
	}
	for _, s := range shards {
		ipamOpts := env.IPAMOptions(2)
		ipamOpts.WatchFilterValue = s.filter
		stop, err := env.StartIPAMWith(ctx, env.ConfigNamed("ipam-"+s.filter), ipamOpts)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(stop)
		cappOpts := env.CAPPOptions(2, "")
		cappOpts.WatchFilterValue = s.filter
		cappOpts.Getenv = getenv
		stop, err = env.StartCAPPWith(ctx, env.ConfigNamed("capp-"+s.filter), cappOpts)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(stop)
	}
	stopCore, err := env.StartCAPICore(managerLogs(t, g))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(stopCore)

	allocator := shards[0]
	global := &v1alpha1.GlobalMetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "shared-lb-", Labels: map[string]string{clusterv1.WatchLabel: allocator.filter}},
		Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.61.0.2-10.61.0.9"}, Prefix: ptr.To[int32](28), Gateway: "10.61.0.1"},
	}
	g.Expect(k8s.Create(ctx, global)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(ctx, global) })

	for _, s := range shards {
		s.ns, err = env.NewNamespace(ctx, s.cluster)
		g.Expect(err).NotTo(HaveOccurred())
		for _, obj := range shardObjects(s, global.Name) {
			g.Expect(k8s.Create(ctx, obj)).To(Succeed(), "creating %T %s", obj, obj.GetName())
		}
	}

	const replicas = 2
	for _, s := range shards {
		scaleWorkers(ctx, g, k8s, s.ns, replicas)
	}
	for _, s := range shards {
		g.Eventually(provisionedMachines(ctx, g, k8s, s.ns)).Should(HaveLen(replicas), "the Machines of %s provisioned", s.cluster)
		g.Eventually(func() bool {
			cluster := &clusterv1.Cluster{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.cluster}, cluster)).To(Succeed())
			return ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false)
		}).Should(BeTrue(), "the PacketCluster of %s (with its VIP) is provisioned", s.cluster)
		g.Expect(metalAPI.devices(ctx, g, s.cluster)).To(ConsistOf(provisionedMachines(ctx, g, k8s, s.ns)()))
	}

	t.Log("every claim is served, by the shard of its pool, and every created object carries its shard's label")
	for _, s := range shards {
		others := otherManagers(shards, s)
		claims := &ipamv1.IPAddressClaimList{}
		g.Expect(k8s.List(ctx, claims, client.InNamespace(s.ns))).To(Succeed())
		// A VIP claim, and one claim per machine and network.
		g.Expect(claims.Items).To(HaveLen(1+2*replicas), "claims of %s", s.cluster)
		for _, c := range claims.Items {
			g.Expect(c.Status.AddressRef.Name).NotTo(BeEmpty(), "claim %s/%s is bound", s.ns, c.Name)
			g.Expect(c.Labels).To(HaveKeyWithValue(clusterv1.WatchLabel, s.filter), "claim %s/%s", s.ns, c.Name)
			g.Expect(writers(&c)).NotTo(ContainElements(others), "claim %s/%s", s.ns, c.Name)
		}
		addresses := &ipamv1.IPAddressList{}
		g.Expect(k8s.List(ctx, addresses, client.InNamespace(s.ns))).To(Succeed())
		g.Expect(addresses.Items).To(HaveLen(len(claims.Items)))
		for _, a := range addresses.Items {
			// The IPAddress is the allocating manager's: the shard of its pool.
			want := s
			if a.Spec.PoolRef.Kind == v1alpha1.GlobalMetalVRFIPPoolKind {
				want = allocator
			}
			g.Expect(a.Labels).To(HaveKeyWithValue(clusterv1.WatchLabel, want.filter), "IPAddress %s/%s", s.ns, a.Name)
			g.Expect(writers(&a)).To(ContainElement("ipam-"+want.filter), "IPAddress %s/%s", s.ns, a.Name)
			g.Expect(writers(&a)).NotTo(ContainElements(otherManagers(shards, want)), "IPAddress %s/%s", s.ns, a.Name)
		}
		pms := &infrav1.PacketMachineList{}
		g.Expect(k8s.List(ctx, pms, client.InNamespace(s.ns))).To(Succeed())
		g.Expect(pms.Items).To(HaveLen(replicas))
		for _, pm := range pms.Items {
			g.Expect(writers(&pm)).To(ContainElement("capp-"+s.filter), "PacketMachine %s/%s", s.ns, pm.Name)
			g.Expect(writers(&pm)).NotTo(ContainElements(others), "PacketMachine %s/%s", s.ns, pm.Name)
			userData := &corev1.Secret{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: controllers.UserDataSecretName(pm.Name)}, userData)).To(Succeed())
			g.Expect(userData.Labels).To(HaveKeyWithValue(clusterv1.WatchLabel, s.filter), "user-data Secret %s/%s", s.ns, userData.Name)
		}
		pc := &infrav1.PacketCluster{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.cluster}, pc)).To(Succeed())
		g.Expect(writers(pc)).To(ContainElement("capp-"+s.filter), "PacketCluster %s", s.cluster)
		g.Expect(writers(pc)).NotTo(ContainElements(others), "PacketCluster %s", s.cluster)
	}

	t.Log("the shared global pool hands out each address once, through its own shard only")
	held := globalAddresses(ctx, g, k8s, global.Name)
	g.Expect(held).To(HaveLen(len(shards) * (1 + replicas)))
	g.Expect(sets.New(held...).Len()).To(Equal(len(held)), "addresses of the global pool: %v", held)
	g.Eventually(used(ctx, k8s, global)).Should(BeEquivalentTo(len(held)))

	t.Log("scaling to 0 takes the machines' claims back, each through its own shard")
	for _, s := range shards {
		scaleWorkers(ctx, g, k8s, s.ns, 0)
	}
	for _, s := range shards {
		g.Eventually(func() []string { return metalAPI.devices(ctx, g, s.cluster) }).Should(BeEmpty())
		g.Eventually(func() int {
			claims := &ipamv1.IPAddressClaimList{}
			g.Expect(k8s.List(ctx, claims, client.InNamespace(s.ns))).To(Succeed())
			return len(claims.Items)
		}).Should(Equal(1), "only the VIP's claim of %s is left", s.cluster)
	}
	g.Eventually(used(ctx, k8s, global)).Should(BeEquivalentTo(len(shards)), "the global pool holds the VIPs only")
}

// shardObjects is the flow's cluster with the shard's label on every
// object (and on the Machines the MachineDeployment makes), its own nodes
// addresses, a VIP from the shared global pool, and a second network of the
// machines on the LB VLAN with addresses from it.
func shardObjects(s *shard, globalPool string) []client.Object {
	fromGlobal := corev1.TypedLocalObjectReference{APIGroup: ptr.To(v1alpha1.GroupVersion.Group), Kind: v1alpha1.GlobalMetalVRFIPPoolKind, Name: globalPool}
	objs := clusterObjects(s.ns, s.cluster)
	for _, obj := range objs {
		labels := obj.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[clusterv1.WatchLabel] = s.filter
		obj.SetLabels(labels)
		switch o := obj.(type) {
		case *v1alpha1.MetalVRFIPPool:
			o.Spec.Addresses, o.Spec.Prefix = []string{s.nodes}, ptr.To[int32](24)
		case *infrav1.PacketCluster:
			o.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{}
			o.Spec.VIPManager = infrav1.VIPManagerKubeVIP
			o.Spec.VIP = &infrav1.ControlPlaneVIP{AddressFromPool: fromGlobal, VXLAN: lbVXLAN}
		case *infrav1.PacketMachineTemplate:
			port := &o.Spec.Template.Spec.Ports[0]
			port.Networks = append(port.Networks, infrav1.Network{VXLAN: lbVXLAN, AddressFromPool: ptr.To(fromGlobal)})
		case *clusterv1.MachineDeployment:
			o.Spec.Template.Labels[clusterv1.WatchLabel] = s.filter
		}
	}
	return objs
}

// otherManagers are the managers of every shard but s.
func otherManagers(shards []*shard, s *shard) []string {
	var names []string
	for _, o := range shards {
		if o != s {
			names = append(names, o.managers()...)
		}
	}
	return names
}

// writers are the managers the API server recorded writes of obj from.
func writers(obj client.Object) []string {
	var names []string
	for _, f := range obj.GetManagedFields() {
		names = append(names, f.Manager)
	}
	return names
}

// globalAddresses are the addresses of every IPAddress of the global pool.
func globalAddresses(ctx context.Context, g Gomega, k8s client.Client, pool string) []string {
	addresses := &ipamv1.IPAddressList{}
	g.Expect(k8s.List(ctx, addresses)).To(Succeed())
	var held []string
	for _, a := range addresses.Items {
		if a.Spec.PoolRef.Kind == v1alpha1.GlobalMetalVRFIPPoolKind && a.Spec.PoolRef.Name == pool {
			held = append(held, a.Spec.Address)
		}
	}
	return held
}
