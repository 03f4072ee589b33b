// Package move runs the real `clusterctl move`, built from the pinned Cluster
// API module, between two management clusters: two API servers, each made
// with `clusterctl init` and running our IPAM manager (and no other manager)
// in this process, which serves the validating webhooks init installed. Both
// managers run during every move, as on real management clusters. The tests
// check that no address is handed out twice across a move.
package move

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

var (
	ctx = context.Background()
	// source and target are the two management clusters, shared by the
	// tests (each works in namespaces of its own).
	source, target *testenv.Environment
	// kubeconfigs are source's and target's kubeconfig files.
	kubeconfigs = map[*testenv.Environment]string{}
	// managers stop the IPAM manager running against each cluster.
	managers = map[*testenv.Environment]func(){}
	// clusterctl is the binary, config the configuration naming the local
	// repository both management clusters were initialized from, and
	// ctlEnv the environment clusterctl runs in (a HOME of its own).
	clusterctl, config string
	ctlEnv             []string
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// run starts the two management clusters, runs the tests and stops them.
func run(m *testing.M) (code int, err error) {
	home, err := os.MkdirTemp("", "move-e2e-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(home)
	// Both managers log to one file, kept when a test fails.
	logs, err := os.CreateTemp("", "move-managers-*.log")
	if err != nil {
		return 0, err
	}
	defer func() {
		if code != 0 {
			fmt.Printf("the IPAM managers' logs are in %s\n", logs.Name())
		} else {
			_ = os.Remove(logs.Name())
		}
	}()
	ctrl.SetLogger(zap.New(zap.WriteTo(logs), zap.UseDevMode(true)))

	if clusterctl, err = testenv.Tool("CLUSTERCTL", "clusterctl"); err != nil {
		return 0, err
	}
	kustomize, err := testenv.Tool("KUSTOMIZE", "kustomize")
	if err != nil {
		return 0, err
	}
	ctlEnv = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "CLUSTERCTL_DISABLE_VERSIONCHECK=true"}
	var stops []func()
	defer func() {
		for _, stop := range slices.Backward(stops) {
			stop()
		}
	}()
	for _, mc := range []struct {
		name string
		env  **testenv.Environment
	}{{"source", &source}, {"target", &target}} {
		env, stop, err := startManagementCluster(mc.name, home, kustomize, logs)
		if stop != nil {
			stops = append(stops, stop)
		}
		if err != nil {
			return 0, fmt.Errorf("starting the %s management cluster: %w", mc.name, err)
		}
		*mc.env = env
	}
	return m.Run(), nil
}

// startManagementCluster starts an API server with Kubernetes' garbage
// collector and namespace controller beside it (as on a real management
// cluster: move's deletions on the source leave the rest to them),
// initializes it with `clusterctl init` the way a user does (move reads
// clusterctl's inventory on both sides and moves only the kinds of the CRDs
// clusterctl installed), here from a local repository, and runs an IPAM
// manager beside it that serves the provider's webhooks. stop, when not
// nil, stops what started.
func startManagementCluster(name, home, kustomize string, logs io.Writer) (env *testenv.Environment, stop func(), err error) {
	env, err = testenv.Start(testenv.Options{Empty: true})
	if err != nil {
		return nil, nil, err
	}
	stop = func() { _ = env.Stop() }
	stopCollector, err := env.StartGarbageCollector(ctx, logs)
	if err != nil {
		return nil, stop, err
	}
	stopCluster := func() { stopCollector(); _ = env.Stop() }
	stop = stopCluster
	if config == "" {
		if config, err = testenv.WriteClusterctlRepository(env.Root, filepath.Join(home, "repository"), kustomize, false); err != nil {
			return nil, stop, err
		}
	}
	if err := testenv.InstallCertManagerCRDs(env.Config); err != nil {
		return nil, stop, err
	}
	kubeconfig := filepath.Join(home, name+".kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		return nil, stop, err
	}
	kubeconfigs[env] = kubeconfig
	// No infrastructure provider: the IPAM manager needs none, and nothing
	// here is a PacketCluster.
	if _, err := testenv.RunTool("", ctlEnv, clusterctl, "init", "--kubeconfig", kubeconfig, "--config", config,
		"--core", "cluster-api", "--bootstrap", "-", "--control-plane", "-", "--ipam", "metal-vrf"); err != nil {
		return nil, stop, err
	}
	if err := env.ServeIPAMWebhooks(ctx); err != nil {
		return nil, stop, err
	}
	if managers[env], err = env.StartIPAM(ctx, env.IPAMOptions(4)); err != nil {
		return nil, stop, err
	}
	return env, func() { managers[env](); stopCluster() }, nil
}

// restartManager stops env's IPAM manager and starts another, which seeds
// its allocation domains again from the records and objects left.
func restartManager(g Gomega, env *testenv.Environment) {
	managers[env]()
	var err error
	managers[env], err = env.StartIPAM(ctx, env.IPAMOptions(4))
	g.Expect(err).NotTo(HaveOccurred())
}

// newG is a Gomega for t with the suite's waiting times.
func newG(t *testing.T) *WithT {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(30 * time.Second)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	g.SetDefaultConsistentlyDuration(3 * time.Second)
	g.SetDefaultConsistentlyPollingInterval(250 * time.Millisecond)
	return g
}

// move runs `clusterctl move --namespace ns` from source to target.
func move(t *testing.T, g Gomega, ns string) {
	g.Expect(<-startMove(t, ns)).To(Succeed())
}

// startMove starts `clusterctl move --namespace ns` from source to target;
// the channel tells how it ended.
func startMove(t *testing.T, ns string) <-chan error {
	done := make(chan error, 1)
	go func() {
		start := time.Now()
		out, err := testenv.RunTool("", ctlEnv, clusterctl, "move", "--kubeconfig", kubeconfigs[source],
			"--to-kubeconfig", kubeconfigs[target], "--namespace", ns, "--config", config)
		if err != nil {
			err = fmt.Errorf("clusterctl move --namespace %s: %w\n%s", ns, err, out)
		}
		t.Logf("clusterctl move --namespace %s took %s", ns, time.Since(start).Round(time.Second))
		done <- err
	}()
	return done
}

// moveWhilePaused moves cluster's namespace, calling whilePaused once move
// has paused cluster on the source and before it copies anything: the
// Cluster carries clusterctl's block-move annotation, whose removal move
// waits for after pausing the Clusters; the test removes it after
// whilePaused.
func moveWhilePaused(t *testing.T, g Gomega, cluster *clusterv1.Cluster, whilePaused func()) {
	k8s := source.Client
	base := cluster.DeepCopy()
	metav1.SetMetaDataAnnotation(&cluster.ObjectMeta, clusterctlv1.BlockMoveAnnotation, "")
	g.Expect(k8s.Patch(ctx, cluster, client.MergeFrom(base))).To(Succeed())
	done := startMove(t, cluster.Namespace)
	g.Eventually(func(g Gomega) bool {
		return ptr.Deref(getCluster(g, k8s, cluster.Namespace, cluster.Name).Spec.Paused, false)
	}).Should(BeTrue(), "move pauses the Cluster")
	// Let the manager's cache see the pause too.
	time.Sleep(time.Second)
	whilePaused()
	cluster = getCluster(g, k8s, cluster.Namespace, cluster.Name)
	base = cluster.DeepCopy()
	delete(cluster.Annotations, clusterctlv1.BlockMoveAnnotation)
	g.Expect(k8s.Patch(ctx, cluster, client.MergeFrom(base))).To(Succeed())
	g.Expect(<-done).To(Succeed())
}

// newPoolNamespace creates a namespace on the source holding a
// MetalVRFIPPool named pool over addresses, with gateway on a /24.
func newPoolNamespace(g Gomega, prefix, pool, addresses, gateway string) string {
	ns, err := source.NewNamespace(ctx, prefix)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(source.Client.Create(ctx, &v1alpha1.MetalVRFIPPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pool},
		Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{addresses}, Prefix: ptr.To[int32](24), Gateway: gateway},
	})).To(Succeed())
	return ns
}

// createCluster creates a Cluster ready to move: move checks that its
// infrastructure is provisioned and its control plane initialized, which,
// with no Cluster API core manager running, the test writes itself.
func createCluster(g Gomega, k8s client.Client, ns, name string) *clusterv1.Cluster {
	// The API server wants a spec with at least one field besides paused,
	// which move sets and clears.
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: name + ".example.com", Port: 6443}},
	}
	g.Expect(k8s.Create(ctx, cluster)).To(Succeed())
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	conditions.Set(cluster, metav1.Condition{
		Type: clusterv1.ClusterControlPlaneInitializedCondition, Status: metav1.ConditionTrue, Reason: clusterv1.ClusterControlPlaneInitializedReason,
	})
	g.Expect(k8s.Status().Update(ctx, cluster)).To(Succeed())
	return cluster
}

// getCluster reads the Cluster of ns named name from k8s (after a move, the
// target's copy, with a UID of its own).
func getCluster(g Gomega, k8s client.Client, ns, name string) *clusterv1.Cluster {
	cluster := &clusterv1.Cluster{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cluster)).To(Succeed())
	return cluster
}

// createClaim creates a claim of cluster's on the pool of kind and name,
// with annotations. It belongs to its Cluster the way a machine's claim does
// through its machine: an owner reference, which move follows, and the
// cluster-name label, through which the IPAM manager pauses it with its
// Cluster.
func createClaim(g Gomega, k8s client.Client, cluster *clusterv1.Cluster, name, kind, pool string, annotations map[string]string) {
	claim := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace, Name: name, Annotations: annotations,
			Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: cluster.Name, UID: cluster.UID,
			}},
		},
		Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: kind, Name: pool}},
	}
	g.Expect(k8s.Create(ctx, claim)).To(Succeed())
}

// boundAddresses maps each bound claim of ns to its IPAddress's address.
func boundAddresses(g Gomega, k8s client.Client, ns string) map[string]string {
	addresses, err := testenv.ClaimedAddresses(ctx, k8s, ns)
	g.Expect(err).NotTo(HaveOccurred())
	return addresses
}

// waitBound waits until n claims of ns are bound and returns their
// addresses.
func waitBound(g Gomega, k8s client.Client, ns string, n int) map[string]string {
	var addresses map[string]string
	g.Eventually(func(g Gomega) {
		addresses = boundAddresses(g, k8s, ns)
		g.Expect(addresses).To(HaveLen(n))
	}).Should(Succeed(), "%d claims of %s bound", n, ns)
	return addresses
}

// readyCondition is the claim's Ready condition, or nil.
func readyCondition(g Gomega, k8s client.Client, ns, name string) *metav1.Condition {
	claim := &ipamv1.IPAddressClaim{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, claim)).To(Succeed())
	return apimeta.FindStatusCondition(claim.Status.Conditions, ipamv1.IPAddressClaimReadyCondition)
}

// duplicates describes every address more than one IPAddress of the
// namespaces holds on k8s (only the pool's of kind and name): the address,
// each IPAddress and its claim's Ready condition.
func duplicates(g Gomega, k8s client.Client, kind, pool string, namespaces ...string) []string {
	holders := map[string][]ipamv1.IPAddress{}
	for _, ns := range namespaces {
		list := &ipamv1.IPAddressList{}
		g.Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		for _, a := range list.Items {
			if a.Spec.PoolRef.Kind == kind && a.Spec.PoolRef.Name == pool {
				holders[a.Spec.Address] = append(holders[a.Spec.Address], a)
			}
		}
	}
	var found []string
	for address, held := range holders {
		if len(held) < 2 {
			continue
		}
		var by []string
		for _, a := range held {
			ready := "no Ready condition"
			if c := readyCondition(g, k8s, a.Namespace, a.Spec.ClaimRef.Name); c != nil {
				ready = fmt.Sprintf("Ready=%s %s %q", c.Status, c.Reason, c.Message)
			}
			by = append(by, fmt.Sprintf("IPAddress %s/%s (created %s) of claim %s: %s",
				a.Namespace, a.Name, a.CreationTimestamp.Format(time.RFC3339), a.Spec.ClaimRef.Name, ready))
		}
		found = append(found, address+" held by "+strings.Join(by, " and by "))
	}
	sort.Strings(found)
	return found
}

// expectEmpty expects ns on k8s to hold no claim, IPAddress or pool.
func expectEmpty(g Gomega, k8s client.Client, ns string) {
	g.Eventually(func(g Gomega) {
		for _, list := range []client.ObjectList{&ipamv1.IPAddressClaimList{}, &ipamv1.IPAddressList{}, &v1alpha1.MetalVRFIPPoolList{}} {
			g.Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
			items, err := apimeta.ExtractList(list)
			g.Expect(err).NotTo(HaveOccurred())
			var left []string
			for _, item := range items {
				obj := item.(client.Object)
				left = append(left, fmt.Sprintf("%s (finalizers %v)", obj.GetName(), obj.GetFinalizers()))
			}
			g.Expect(left).To(BeEmpty(), "%T left in %s", list, ns)
		}
	}).Should(Succeed())
}

// deleteNamespace deletes ns and waits until the namespace controller has
// deleted what it held and the namespace is gone.
func deleteNamespace(g Gomega, k8s client.Client, ns string) {
	g.Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	g.Eventually(func() bool {
		err := k8s.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		return apierrors.IsNotFound(err)
	}).Should(BeTrue(), "namespace %s deleted", ns)
}

// lowestFree returns the n lowest addresses from first up that are not in
// used.
func lowestFree(g Gomega, first string, used []string, n int) []string {
	a, err := netip.ParseAddr(first)
	g.Expect(err).NotTo(HaveOccurred())
	var free []string
	for ; len(free) < n; a = a.Next() {
		if !slices.Contains(used, a.String()) {
			free = append(free, a.String())
		}
	}
	return free
}

// lowest is the lowest of addresses.
func lowest(g Gomega, addresses []string) string {
	var low netip.Addr
	for _, s := range addresses {
		a, err := netip.ParseAddr(s)
		g.Expect(err).NotTo(HaveOccurred())
		if !low.IsValid() || a.Less(low) {
			low = a
		}
	}
	return low.String()
}
