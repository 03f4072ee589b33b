package capp

import (
	"maps"
	"math"
	"net/http"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/promrules"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// The operators' alerts and dashboard, as released.
var (
	alertsFile    = filepath.Join("..", "..", "..", "config", "monitoring", "alerts.yaml")
	dashboardFile = filepath.Join("..", "..", "..", "config", "monitoring", "dashboard.json")
)

// The alerts' thresholds, as alerts.yaml sets them.
const (
	claimPendingThreshold  = 10 * time.Minute
	creationStuckThreshold = time.Hour
)

// ruleInterval is promtool's step: one read of the managers per interval.
const ruleInterval = time.Minute

var _ = Describe("The operators' alerts and dashboard", func() {
	It("fire on the series the managers export, each only when it should, and query only exported metrics", func() {
		promtool, err := testenv.Tool("PROMTOOL", "promtool")
		Expect(err).NotTo(HaveOccurred())
		promqlNames, err := testenv.Tool("PROMQLNAMES", "promqlnames")
		Expect(err).NotTo(HaveOccurred())
		tools := promrules.Tools{Promtool: promtool, PromQLNames: promqlNames}
		dir := GinkgoT().TempDir()
		rules, ruleExprs, err := tools.CheckRules(dir, alertsFile)
		Expect(err).NotTo(HaveOccurred())

		ns := newNamespace()
		read := func(g Gomega) promrules.Read {
			r, err := promrules.ReadFrom(metrics.Registry)
			g.Expect(err).NotTo(HaveOccurred())
			return r
		}
		pool := func(name string) map[string]string {
			return map[string]string{"kind": v1alpha1.MetalVRFIPPoolKind, "namespace": ns, "name": name}
		}
		with := func(labels map[string]string, k, v string) map[string]string {
			out := maps.Clone(labels)
			out[k] = v
			return out
		}

		By("two pools, one of two addresses and one of a /24 with a claim bound")
		for name, spec := range map[string]v1alpha1.MetalVRFIPPoolSpec{
			"small": {Addresses: []string{"10.62.0.2-10.62.0.3"}, Prefix: ptr.To[int32](24), Gateway: "10.62.0.1"},
			"roomy": {Addresses: []string{"10.63.0.0/24"}, Prefix: ptr.To[int32](24), Gateway: "10.63.0.1"},
		} {
			Expect(k8s.Create(ctx, &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec})).To(Succeed())
		}
		claim := func(name, poolName string) *ipamv1.IPAddressClaim {
			c := &ipamv1.IPAddressClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: ipamv1.IPAddressClaimSpec{PoolRef: ipamv1.IPPoolReference{
					APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: poolName,
				}},
			}
			Expect(k8s.Create(ctx, c)).To(Succeed())
			return c
		}
		claim("roomy-0", "roomy")
		var start promrules.Read
		Eventually(func(g Gomega) {
			start = read(g)
			g.Expect(start.Value("metal_vrf_ipam_pool_addresses", with(pool("small"), "state", "free"))).To(Equal(2.0))
			g.Expect(start.Value("metal_vrf_ipam_pool_addresses", with(pool("roomy"), "state", "used"))).To(Equal(1.0))
			// The manager's cache may see the claim bound after the pool.
			g.Expect(start.Select("metal_vrf_ipam_pool_pending_claims", map[string]string{"namespace": ns})).To(BeEmpty())
		}).Should(Succeed())

		By("a device created through two 429s, then read through two server errors")
		answers := func(op sim.Operation, code int) func() int {
			before := metalSim.Answers(op, code)
			return func() int { return metalSim.Answers(op, code) - before }
		}
		limited, failed := answers(sim.OpCreateDevice, http.StatusTooManyRequests), answers(sim.OpFindDeviceByID, http.StatusInternalServerError)
		metalSim.FailNext(sim.OpCreateDevice, 2, http.StatusTooManyRequests, 0)
		metalSim.FailNext(sim.OpFindDeviceByID, 2, http.StatusInternalServerError, 0)
		pm := readyMachine(ns, "silent", nil, nil)
		// The device is in creation from its first try until a read sees it
		// active; the read after the 500s may already see it so (the
		// client's retries can be quicker than a loaded test's scrape), so
		// the creation is read on its own, before the 500s.
		var creating, faulted promrules.Read
		Eventually(func(g Gomega) {
			g.Expect(limited()).To(Equal(2), "429 answers to createDevice")
			creating = read(g)
			g.Expect(creating.Value("capp_device_creations_in_flight", nil)).To(Equal(1.0))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(failed()).To(Equal(2), "500 answers to findDeviceById")
			faulted = read(g)
		}).Should(Succeed())
		code := func(c string) map[string]string { return map[string]string{"code": c} }
		Expect(increase(start, faulted, "metal_api_requests_total", code("429"))).To(Equal(2.0), "429 answers counted")
		Expect(increase(start, faulted, "metal_api_requests_total", code("500"))).To(Equal(2.0), "500 answers counted")

		By("three claims on the pool of two addresses")
		claim("small-0", "small")
		claim("small-1", "small")
		waiting := claim("small-2", "small")
		Eventually(func(g Gomega) {
			bound := 0
			for _, c := range claimsOf(ns) {
				if c.Status.AddressRef.Name != "" {
					bound++
				}
			}
			g.Expect(bound).To(Equal(3), "claims bound, roomy-0 included")
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(waiting), waiting)).To(Succeed())
			g.Expect(waiting.Status.Conditions).To(ContainElement(And(
				HaveField("Type", ipamv1.IPAddressClaimReadyCondition),
				HaveField("Reason", ipamv1.IPAddressClaimReadyPoolExhaustedReason))))
		}).Should(Succeed())

		By("the node never reporting its network")
		Eventually(condition(pm, infrav1.NodeNetworkConfiguredCondition), nodeReportTimeout+30*time.Second).Should(
			haveCondition(metav1.ConditionFalse, infrav1.TimeoutReason, ""))
		var end promrules.Read
		Eventually(func(g Gomega) {
			end = read(g)
			g.Expect(end.Value("capp_device_creations_in_flight", nil)).To(Equal(0.0))
			g.Expect(end.Value("metal_vrf_ipam_pool_pending_claims", pool("small"))).To(Equal(1.0))
			g.Expect(end.Value("metal_vrf_ipam_pool_addresses", with(pool("small"), "state", "free"))).To(Equal(0.0))
		}).Should(Succeed())
		timeouts := map[string]string{"outcome": "timeout"}
		Expect(increase(faulted, end, "capp_node_reports_total", timeouts)).To(BeNumerically(">=", 1), "node report timeouts counted")

		By("promtool's rule tests over these reads")
		job := promrules.TargetLabels["job"]
		alert := func(name string, labels map[string]string, summary, description string) promrules.Alert {
			labels = maps.Clone(labels)
			labels["alertname"], labels["severity"] = name, "warning"
			return promrules.Alert{Labels: labels, Annotations: map[string]string{"summary": summary, "description": description}}
		}
		small := v1alpha1.MetalVRFIPPoolKind + " " + ns + "/small"
		exhausted := alert("MetalVRFIPPoolNearlyExhausted", pool("small"), "An IP pool has less than 10% of its addresses free.",
			small+" has less than 10% of its addresses free: add addresses (spec.addresses or its source) before claims wait.")
		pending := alert("MetalVRFIPClaimsPending", pool("small"), "IPAddressClaims have waited more than 10 minutes for an address.",
			"A claim on "+small+" has waited more than 10 minutes: its Ready condition says why (pool exhausted, missing or not ready, its Cluster paused).")
		ofJob := map[string]string{"job": job}
		rateLimited := alert("MetalAPIRateLimited", ofJob, "The Equinix Metal API has answered 429 for 15 minutes.",
			"The Metal API has rate limited "+job+" for 15 minutes: lower --concurrency or --max-device-creations, or spread the clusters over projects.")
		apiErrors := alert("MetalAPIErrors", ofJob, "More than 5% of the requests to the Equinix Metal API fail.",
			"More than 5% of the Metal API requests of "+job+" got a server error or no answer for 15 minutes: see the platform status and the manager logs.")
		stuck := alert("PacketMachineDeviceCreationStuck", ofJob, "A device has been in creation for more than an hour.",
			"A device "+job+" is creating has not become active in an hour: the PacketMachines with DeviceReady False, reason DeviceProvisioning, name it.")
		nodeTimeouts := alert("PacketMachineNodeReportTimeouts", ofJob, "Nodes did not report their network configuration in time.",
			"Nodes of "+job+" did not report their network configuration within --node-report-timeout in the last hour: the PacketMachines with NodeNetworkConfigured False, reason Timeout, name them; read their serial console.")

		const steps = 90
		inNamespace := map[string]string{"namespace": ns}
		held := func(_ string, v float64) string { return promrules.Replay(steps, v) }
		aging := func(_ string, v float64) string { return promrules.Aging(v, ruleInterval, steps) }
		// paced continues each counter at the pace it had from one read to
		// the next; replayed gives both reads, then holds the second.
		paced := func(from, to promrules.Read, name string) []promrules.Input {
			series := maps.Clone(from.Select(name, nil))
			maps.Copy(series, to.Select(name, nil))
			return promrules.Inputs(series, func(s string, _ float64) string {
				return promrules.Repeat(from.Values[s], to.Values[s], steps)
			})
		}
		replayed := func(from, to promrules.Read, name string) []promrules.Input {
			series := maps.Clone(from.Select(name, nil))
			maps.Copy(series, to.Select(name, nil))
			return promrules.Inputs(series, func(s string, _ float64) string {
				return promrules.Replay(steps, from.Values[s], to.Values[s])
			})
		}
		// crossing returns the last evaluation before an age read as v,
		// growing one interval per interval, exceeds threshold, and the
		// first after.
		crossing := func(v float64, threshold time.Duration) (before, after time.Duration) {
			Expect(v).To(BeNumerically("<", threshold.Seconds()), "an age read already past its alert's threshold")
			n := time.Duration(math.Floor((threshold.Seconds() - v) / ruleInterval.Seconds()))
			return n * ruleInterval, (n + 1) * ruleInterval
		}
		none := []promrules.Alert{}
		at := func(eval time.Duration, alert string, alerts ...promrules.Alert) promrules.AlertTest {
			return promrules.AlertTest{EvalTime: promrules.Duration(eval), AlertName: alert, Alerts: append(none, alerts...)}
		}
		pendingAge := end.Value("metal_vrf_ipam_pool_oldest_pending_claim_age_seconds", pool("small"))
		pendingBefore, pendingAfter := crossing(pendingAge, claimPendingThreshold)
		creationAge := creating.Value("capp_oldest_device_creation_age_seconds", nil)
		creationBefore, creationAfter := crossing(creationAge, creationStuckThreshold)
		poolInputs := func(r promrules.Read) []promrules.Input {
			return append(
				promrules.Inputs(r.Select("metal_vrf_ipam_pool_addresses", inNamespace), held),
				promrules.Inputs(r.Select("metal_vrf_ipam_pool_oldest_pending_claim_age_seconds", inNamespace), aging)...)
		}
		tests := []promrules.UnitTest{{
			Name:        "pools with addresses free and no claim waiting",
			InputSeries: poolInputs(start),
			AlertTests: []promrules.AlertTest{
				at(30*time.Minute, "MetalVRFIPPoolNearlyExhausted"),
				at(30*time.Minute, "MetalVRFIPClaimsPending"),
			},
		}, {
			Name:        "a pool out of addresses and a claim waiting on it",
			InputSeries: poolInputs(end),
			AlertTests: []promrules.AlertTest{
				at(10*time.Minute, "MetalVRFIPPoolNearlyExhausted"),
				at(20*time.Minute, "MetalVRFIPPoolNearlyExhausted", exhausted),
				at(pendingBefore, "MetalVRFIPClaimsPending"),
				at(pendingAfter, "MetalVRFIPClaimsPending", pending),
			},
		}, {
			Name:        "Metal API requests at the pace of the 429s and server errors",
			InputSeries: paced(start, faulted, "metal_api_requests_total"),
			AlertTests: []promrules.AlertTest{
				at(10*time.Minute, "MetalAPIRateLimited"),
				at(10*time.Minute, "MetalAPIErrors"),
				at(20*time.Minute, "MetalAPIRateLimited", rateLimited),
				at(20*time.Minute, "MetalAPIErrors", apiErrors),
			},
		}, {
			Name:        "Metal API requests at the pace after the faults",
			InputSeries: paced(faulted, end, "metal_api_requests_total"),
			AlertTests: []promrules.AlertTest{
				at(20*time.Minute, "MetalAPIRateLimited"),
				at(20*time.Minute, "MetalAPIErrors"),
			},
		}, {
			Name:        "a device in creation that stays so",
			InputSeries: promrules.Inputs(creating.Select("capp_oldest_device_creation_age_seconds", nil), aging),
			AlertTests: []promrules.AlertTest{
				at(creationBefore, "PacketMachineDeviceCreationStuck"),
				at(creationAfter, "PacketMachineDeviceCreationStuck", stuck),
			},
		}, {
			// Nothing in creation: the age is 0 until a creation begins.
			Name:        "no device in creation",
			InputSeries: promrules.Inputs(end.Select("capp_oldest_device_creation_age_seconds", nil), held),
			AlertTests:  []promrules.AlertTest{at(steps*ruleInterval, "PacketMachineDeviceCreationStuck")},
		}, {
			Name:        "node reports while the device was created",
			InputSeries: replayed(start, faulted, "capp_node_reports_total"),
			AlertTests:  []promrules.AlertTest{at(5*time.Minute, "PacketMachineNodeReportTimeouts")},
		}, {
			Name:        "node reports until the node timed out",
			InputSeries: replayed(faulted, end, "capp_node_reports_total"),
			AlertTests: []promrules.AlertTest{
				at(5*time.Minute, "PacketMachineNodeReportTimeouts", nodeTimeouts),
				// increase over the last hour: an hour after, it is over.
				at(70*time.Minute, "PacketMachineNodeReportTimeouts"),
			},
		}}
		if err := tools.TestRules(dir, rules, ruleInterval, tests); err != nil {
			Fail(err.Error()) // whole: promtool's report and the test file
		}

		By("the dashboard's and the alerts' expressions parsing and naming only exported metrics")
		dashboardExprs, err := promrules.DashboardExprs(dashboardFile)
		Expect(err).NotTo(HaveOccurred())
		Expect(dashboardExprs).NotTo(BeEmpty())
		names, err := tools.MetricNames(append(dashboardExprs, ruleExprs...))
		Expect(err).NotTo(HaveOccurred())
		for expr, selected := range names {
			Expect(selected).NotTo(BeEmpty(), "%s selects no metric", expr)
			for _, name := range selected {
				Expect(end.Names).To(HaveKey(name), "%s queries %s, which the managers do not export", expr, name)
			}
		}

		Expect(k8s.Delete(ctx, pm)).To(Succeed())
		Eventually(gone(pm)).Should(BeTrue())
	})
})

// increase is how much the series of name whose labels include match grew,
// summed, from one read to the next.
func increase(from, to promrules.Read, name string, match map[string]string) float64 {
	var total float64
	for _, v := range to.Select(name, match) {
		total += v
	}
	for _, v := range from.Select(name, match) {
		total -= v
	}
	return total
}
