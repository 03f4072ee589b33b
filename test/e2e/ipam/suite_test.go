// Package ipam holds the IPAM provider's end-to-end suite: a real
// kube-apiserver and etcd with CAPI's CRDs, Kubernetes' garbage collector
// and namespace controller beside them (as on a real management cluster:
// owner references, foreground and orphan deletions and restores behave
// as they do there), the provider's webhooks, and the provider's manager
// running in-process with several workers.
package ipam

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/manager"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// concurrency is the number of workers the manager under test runs: more
// than one, so allocation safety under concurrent reconciles is exercised by
// every test.
const concurrency = 8

var (
	env      *testenv.Environment
	k8s      client.Client
	ctx      context.Context
	stopIPAM func()
	// stopCollector stops Kubernetes' garbage collector.
	stopCollector func()
	// metalListener serves every test's Metal API simulator (see
	// startMetalAPI): the one endpoint the managers allow.
	metalListener *httptest.Server
)

func TestIPAM(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "IPAM provider")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	ctx = context.Background()
	var err error
	env, err = testenv.Start(testenv.Options{Webhooks: true, CAPPCRDs: true})
	Expect(err).NotTo(HaveOccurred())
	k8s = env.Client
	stopCollector, err = env.StartGarbageCollector(ctx, GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())
	metalListener = httptest.NewServer(http.HandlerFunc(serveMetalAPIs))
	stopIPAM, err = env.StartIPAM(ctx, ipamOptions())
	Expect(err).NotTo(HaveOccurred())
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
})

var _ = AfterSuite(func() {
	if stopIPAM != nil {
		stopIPAM()
	}
	if metalListener != nil {
		metalListener.Close()
	}
	if stopCollector != nil {
		stopCollector()
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// ipamOptions are the options of every manager the suite starts. Sources are
// read again every second, and a failing Metal API is given up on quickly,
// so that source changes and outages show within a test.
func ipamOptions() manager.Options {
	opts := env.IPAMOptions(concurrency)
	opts.SourceResyncPeriod = time.Second
	opts.MetalEndpoints = []string{metalListener.URL}
	opts.MetalTimeout = 5 * time.Second
	opts.MetalRetry = metal.RetryPolicy{MaxAttempts: 2, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	return opts
}

// replaceIPAM runs, for one spec, a manager with opts instead of the
// suite's, and brings the suite's back when the spec ends.
func replaceIPAM(opts manager.Options) {
	GinkgoHelper()
	stopIPAM()
	DeferCleanup(func() {
		var err error
		stopIPAM, err = env.StartIPAM(ctx, ipamOptions())
		Expect(err).NotTo(HaveOccurred())
	})
	stop, err := env.StartIPAM(ctx, opts)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(stop)
}

// newNamespace creates a namespace of its own for one test.
func newNamespace() string {
	GinkgoHelper()
	ns, err := env.NewNamespace(ctx, "ipam")
	Expect(err).NotTo(HaveOccurred())
	return ns
}

// poolSpec is a pool spec over addresses with prefix and gateway.
func poolSpec(prefix int32, gateway string, addresses ...string) v1alpha1.MetalVRFIPPoolSpec {
	return v1alpha1.MetalVRFIPPoolSpec{Addresses: addresses, Prefix: ptr.To(prefix), Gateway: gateway}
}

func createPool(ns, name string, spec v1alpha1.MetalVRFIPPoolSpec) *v1alpha1.MetalVRFIPPool {
	pool := &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	Expect(k8s.Create(ctx, pool)).To(Succeed())
	return pool
}

func createGlobalPool(name string, spec v1alpha1.MetalVRFIPPoolSpec) *v1alpha1.GlobalMetalVRFIPPool {
	pool := &v1alpha1.GlobalMetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	Expect(k8s.Create(ctx, pool)).To(Succeed())
	return pool
}

// newClaim returns (without creating) a claim on the pool of kind and name.
func newClaim(ns, name, kind, pool string) *ipamv1.IPAddressClaim {
	return &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
			APIGroup: v1alpha1.GroupVersion.Group, Kind: kind, Name: pool,
		}},
	}
}

func createClaim(ns, name, kind, pool string) *ipamv1.IPAddressClaim {
	claim := newClaim(ns, name, kind, pool)
	Expect(k8s.Create(ctx, claim)).To(Succeed())
	return claim
}

// boundAddress waits until the claim is bound and returns its IPAddress.
func boundAddress(claim *ipamv1.IPAddressClaim) *ipamv1.IPAddress {
	GinkgoHelper()
	address := &ipamv1.IPAddress{}
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
		g.Expect(claim.Status.AddressRef.Name).NotTo(BeEmpty(), "claim %s is not bound", claim.Name)
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: claim.Status.AddressRef.Name}, address)).To(Succeed())
	}).Should(Succeed())
	return address
}

// readyCondition returns the claim's current Ready condition, or nil.
func readyCondition(claim *ipamv1.IPAddressClaim) *metav1.Condition {
	current := &ipamv1.IPAddressClaim{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(claim), current); err != nil {
		return nil
	}
	for i := range current.Status.Conditions {
		if current.Status.Conditions[i].Type == ipamv1.IPAddressClaimReadyCondition {
			return &current.Status.Conditions[i]
		}
	}
	return nil
}

// deleteAndWait deletes obj and waits until it is gone.
func deleteAndWait(obj client.Object) {
	GinkgoHelper()
	Expect(client.IgnoreNotFound(k8s.Delete(ctx, obj))).To(Succeed())
	Eventually(func() bool {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		return client.IgnoreNotFound(err) == nil && err != nil
	}).Should(BeTrue(), "%s was not deleted", obj.GetName())
	if _, claim := obj.(*ipamv1.IPAddressClaim); claim {
		// A claim goes at once; the manager then deletes the IPAddress
		// named after it and, once that is gone, releases the address: its
		// record goes, and the address is free an instant later.
		Eventually(func() bool {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), &ipamv1.IPAddress{})
			return client.IgnoreNotFound(err) == nil && err != nil
		}).Should(BeTrue(), "the IPAddress of claim %s was not deleted", obj.GetName())
		Eventually(func() ([]string, error) {
			held, err := env.AllocationRecords(ctx, obj.GetNamespace())
			var mine []string
			for address, name := range held {
				if name == obj.GetName() {
					mine = append(mine, address)
				}
			}
			return mine, err
		}).Should(BeEmpty(), "the address of claim %s was not released", obj.GetName())
	}
}

// allocationOutcomes reads the provider's allocation counter for an outcome,
// summed over pool kinds, from the in-process metrics registry.
func allocationOutcomes(outcome string) float64 {
	GinkgoHelper()
	return counterSum("metal_vrf_ipam_allocations_total", func(labels map[string]string) bool { return labels["outcome"] == outcome })
}

// counterSum sums the series of the counter name whose labels match, from
// the in-process metrics registry.
func counterSum(name string, match func(labels map[string]string) bool) float64 {
	GinkgoHelper()
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	var sum float64
	for _, family := range families {
		if family.GetName() != name {
			continue
		}
		for _, m := range family.GetMetric() {
			labels := map[string]string{}
			for _, label := range m.GetLabel() {
				labels[label.GetName()] = label.GetValue()
			}
			if match(labels) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
