package workload

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// startTarget starts, in the background, the management cluster a test
// moves its cluster to, made as the suite's (clusterctl init, the same
// providers); the function returned waits for it. It stops with the test.
func startTarget(ctx context.Context, t *testing.T) func(Gomega) *management {
	type started struct {
		m    *management
		stop func()
		err  error
	}
	done := make(chan started, 1)
	go func() {
		m, stop, err := startManagement(ctx, "target", false)
		done <- started{m, stop, err}
	}()
	wait := sync.OnceValue(func() started { return <-done })
	t.Cleanup(func() {
		if s := wait(); s.stop != nil {
			s.stop()
		}
	})
	return func(g Gomega) *management {
		s := wait()
		g.Expect(s.err).NotTo(HaveOccurred(), "starting the target management cluster")
		return s.m
	}
}

// clusterctlMove is Cluster API's clusterctl move spec: the running cluster
// moved with `clusterctl move` to a second management cluster, its IPAM
// objects with it (the pool, the claims, the IPAddresses), then scaled
// there. Nothing of it stays on the source; on the target every claim is
// bound to its address of before, the pool counts them, the devices are
// the same (adopted, none created or deleted) and the Cluster is Available
// (the emulated workload cluster answers at its endpoint all along: the
// emulator reads the platform, not the management cluster). Then the
// MachineDeployment 1 -> 2 on the target: the new machine gets an address
// of its own, the moved ones stay bound, and no address is held twice
// across both management clusters.
func clusterctlMove(ctx context.Context, t *testing.T, r *run, target func(Gomega) *management) {
	g := frameworkG(t)
	source := suite.source
	before := r.addresses(ctx, g)
	claimed, err := testenv.ClaimedAddresses(ctx, source.k8s, r.ns)
	g.Expect(err).NotTo(HaveOccurred())
	devices := slices.Sorted(maps.Keys(r.devicesByProviderID(ctx, g)))
	to := target(g)

	t.Logf("clusterctl move --namespace %s: Machines and addresses %v, devices %v", r.ns, before, devices)
	start := time.Now()
	out, err := testenv.RunTool("", suite.ctlEnv, suite.clusterctl, "move", "--kubeconfig", source.kubeconfig,
		"--to-kubeconfig", to.kubeconfig, "--namespace", r.ns, "--config", suite.config)
	g.Expect(err).NotTo(HaveOccurred(), "clusterctl move:\n%s", out)
	t.Logf("clusterctl move took %s", time.Since(start).Round(time.Second))
	r.k8s, r.management = to.k8s, to

	t.Log("nothing of the cluster is left on the source")
	g.Eventually(func(g Gomega) {
		for _, list := range []client.ObjectList{&clusterv1.ClusterList{}, &clusterv1.MachineDeploymentList{}, &clusterv1.MachineList{},
			&controlplanev1.KubeadmControlPlaneList{}, &infrav1.PacketClusterList{}, &infrav1.PacketMachineList{},
			&v1alpha1.MetalVRFIPPoolList{}, &ipamv1.IPAddressClaimList{}, &ipamv1.IPAddressList{}} {
			g.Expect(source.k8s.List(ctx, list, client.InNamespace(r.ns))).To(Succeed())
			g.Expect(list).To(HaveField("Items", BeEmpty()), "%T left on the source", list)
		}
	}).Should(Succeed())

	t.Log("on the target: every claim bound to its address of before, counted by the pool; the same devices; the Cluster Available")
	g.Eventually(func() (map[string]string, error) { return testenv.ClaimedAddresses(ctx, to.k8s, r.ns) }).Should(Equal(claimed))
	g.Eventually(func() int64 { return r.poolUsed(ctx) }).Should(BeEquivalentTo(len(claimed)), "the target's pool counts the moved addresses")
	g.Eventually(func(g Gomega) {
		cluster := r.cluster(ctx, g)
		g.Expect(conditions.IsTrue(cluster, clusterv1.AvailableCondition)).To(BeTrue(), "Available: %v", conditions.Get(cluster, clusterv1.AvailableCondition))
	}).Should(Succeed())
	g.Expect(slices.Sorted(maps.Keys(r.devicesByProviderID(ctx, g)))).To(Equal(devices), "the target created and deleted no device")

	t.Log("scaling the MachineDeployment to 2 on the target")
	framework.ScaleAndWaitMachineDeployment(ctx, framework.ScaleAndWaitMachineDeploymentInput{
		ClusterProxy: r.management.proxy(), Cluster: r.cluster(ctx, g), MachineDeployment: r.machineDeployment(ctx, g),
		Replicas: 2, WaitForMachineDeployments: wait,
	})
	after := r.expectAddressesOfMachines(ctx, g, 3)
	for m, a := range before {
		g.Expect(after).To(HaveKeyWithValue(m, a), "Machine %s keeps its moved address", m)
	}
	g.Expect(slices.Compact(slices.Sorted(maps.Values(after)))).To(HaveLen(3), "the new Machine's address is none of the moved ones")
	g.Expect(heldTwice(ctx, g, source.k8s, to.k8s)).To(BeEmpty(), "no address held twice across both management clusters")
	g.Eventually(func() int64 { return r.poolUsed(ctx) }).Should(BeEquivalentTo(3))
	t.Logf("addresses after the scale on the target: %v", after)

	t.Log("the workload cluster, reached through the kubeconfig the target holds, has the new node")
	workload := workloadClient(ctx, g, r.k8s, r.key)
	g.Eventually(func(g Gomega) {
		nodes := &corev1.NodeList{}
		g.Expect(workload.List(ctx, nodes)).To(Succeed())
		g.Expect(nodes.Items).To(HaveLen(3))
	}).Should(Succeed())
}

// poolUsed is how many addresses the cluster's MetalVRFIPPool reports in
// use; -1 before it says.
func (r *run) poolUsed(ctx context.Context) int64 {
	pool := &v1alpha1.MetalVRFIPPool{}
	if err := r.k8s.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: r.name + "-nodes"}, pool); err != nil || pool.PoolStatus().IPAddresses == nil {
		return -1
	}
	return pool.PoolStatus().IPAddresses.Used
}

// heldTwice describes every address of one pool that more than one
// IPAddress of the management clusters holds (all namespaces: the other
// tests' clusters, beside this one, have pools of their own over the same
// addresses).
func heldTwice(ctx context.Context, g Gomega, clusters ...client.Client) []string {
	holders := map[string][]string{}
	for i, k8s := range clusters {
		addresses := &ipamv1.IPAddressList{}
		g.Expect(k8s.List(ctx, addresses)).To(Succeed())
		for _, a := range addresses.Items {
			pool := a.Spec.PoolRef.Kind + " " + a.Spec.PoolRef.Name
			if !strings.HasPrefix(a.Spec.PoolRef.Kind, "Global") {
				pool = a.Spec.PoolRef.Kind + " " + a.Namespace + "/" + a.Spec.PoolRef.Name
			}
			key := a.Spec.Address + " of " + pool
			holders[key] = append(holders[key], fmt.Sprintf("management cluster %d: %s/%s", i, a.Namespace, a.Name))
		}
	}
	var twice []string
	for address, by := range holders {
		if len(by) > 1 {
			twice = append(twice, fmt.Sprintf("%s held by %v", address, by))
		}
	}
	return twice
}
