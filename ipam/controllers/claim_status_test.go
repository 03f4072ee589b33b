package controllers

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// Each fact a claim's reconcile records becomes its Ready condition: the
// status, reason and message users read.
func TestClaimConditionsFromFacts(t *testing.T) {
	pool := poolID{"MetalVRFIPPool", "pool"}
	held := errors.New("registry: requested address 10.0.0.7 is held by claim ns/first")
	checkConditions(t, claimReady, []conditionCase{
		{"bound", addressBound{"10.0.0.5"}, "True", claimBoundReason, "Bound to 10.0.0.5"},
		{"no Cluster", clusterMissing{"spec.clusterName", "nope", "ns"}, "False", clusterNotFoundReason,
			`spec.clusterName "nope": no Cluster of that name in namespace ns; the claim is served once the Cluster exists`},
		{"no pool", poolMissing{pool}, "False", ipamv1.IPAddressClaimReadyPoolNotReadyReason, `MetalVRFIPPool "pool" not found`},
		{"pool deleting", poolDeleting{pool}, "False", ipamv1.IPAddressClaimReadyPoolNotReadyReason, `MetalVRFIPPool "pool" is being deleted`},
		{"pool exhausted", poolExhausted{pool}, "False", ipamv1.IPAddressClaimReadyPoolExhaustedReason,
			`MetalVRFIPPool "pool" has no free address; the claim is served as soon as one is released or the pool grows`},
		{"pool cannot serve", poolCannotServe{pool, "VRF v1: Not Found"}, "False", ipamv1.IPAddressClaimReadyPoolNotReadyReason,
			`MetalVRFIPPool "pool" cannot serve claims: VRF v1: Not Found`},
		{"request refused", allocationFailed{errors.New("annotation x: y is not a plain IP address")}, "False",
			ipamv1.IPAddressClaimReadyAllocationFailedReason, "annotation x: y is not a plain IP address"},
		{"adoption refused", adoptionRefused{"c", errors.New("10.0.0.5 is held by claim ns/d")}, "False",
			ipamv1.IPAddressClaimReadyAllocationFailedReason, "IPAddress c: 10.0.0.5 is held by claim ns/d"},
		{"requested address held", requestedUnavailable{pool: pool, address: netip.MustParseAddr("10.0.0.7"), held: held}, "False",
			ipamv1.IPAddressClaimReadyAllocationFailedReason, held.Error() + "; the claim is served once it is released"},
		{"pinned address held", requestedUnavailable{pool: pool, address: netip.MustParseAddr("10.0.0.7"), pinnedBy: "spec.preAllocations[0]", held: held},
			"False", ipamv1.IPAddressClaimReadyAllocationFailedReason,
			"spec.preAllocations[0] pins 10.0.0.7 to the claim's owner, but " + held.Error() + "; the claim is served once it is released"},
		{"requested address ruled out", requestedUnavailable{pool: pool, address: netip.MustParseAddr("10.0.0.1"), ruledOut: "is the pool's gateway (spec.gateway)"},
			"False", ipamv1.IPAddressClaimReadyAllocationFailedReason,
			`annotation metal-vrf.ipam.cluster.x-k8s.io/requested-address: requested address 10.0.0.1 is the pool's gateway (spec.gateway) in MetalVRFIPPool "pool": ` +
				"request an address the pool hands out, or remove the annotation"},
		{"pinned address ruled out", requestedUnavailable{pool: pool, address: netip.MustParseAddr("10.0.0.1"), pinnedBy: "spec.preAllocations[0]",
			ruledOut: "is the pool's gateway (spec.gateway)"}, "False", ipamv1.IPAddressClaimReadyAllocationFailedReason,
			`spec.preAllocations[0] pins 10.0.0.1 to the claim's owner, but it is the pool's gateway (spec.gateway) in MetalVRFIPPool "pool": pin an address the pool hands out`},
		{"a fact of a pool", noSources{}, "Unknown", "UnknownFact", "controllers.noSources"},
	})
}

// A condition carries the generation it was observed at and a bounded
// message.
func TestSetCondition(t *testing.T) {
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
	setCondition(claim, claimReady(allocationFailed{errors.New(strings.Repeat("x", 2*message.MaxMessage))}))
	c := conditions.Get(claim, ipamv1.IPAddressClaimReadyCondition)
	if c == nil || c.ObservedGeneration != 3 || len(c.Message) > message.MaxMessage {
		t.Errorf("Ready = %+v, want generation 3 and a message of at most %d bytes", c, message.MaxMessage)
	}
}

// conditionCase is a fact and the condition its derivation must give.
type conditionCase struct {
	name   string
	fact   fact
	status metav1.ConditionStatus
	reason string
	msg    string
}

func checkConditions(t *testing.T, derive func(fact) metav1.Condition, cases []conditionCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			c := derive(tt.fact)
			if c.Status != tt.status || c.Reason != tt.reason || c.Message != tt.msg {
				t.Errorf("got %s/%s %q\nwant %s/%s %q", c.Status, c.Reason, c.Message, tt.status, tt.reason, tt.msg)
			}
		})
	}
}
