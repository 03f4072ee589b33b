package controllers

import (
	"errors"
	"math/big"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// Each fact a pool's reconcile records becomes one condition: its status,
// reason and message, as users read them.
func TestPoolConditionsFromFacts(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	down := sourcesFailed{reason: v1alpha1.MetalAPIUnavailableReason, messages: []string{"reading VRF v1: 503", "PacketCluster ns/pc not found (spec.networkRef)"}}
	idle := field.ErrorList{field.Invalid(field.NewPath("spec", "excludedAddresses").Index(0), "10.9.0.1", "lies outside the pool's addresses: it excludes nothing")}
	checkConditions(t, sourcesResolvedCondition, []conditionCase{
		{"resolved", sourcesResolved{3}, "True", v1alpha1.SourcesResolvedReason, "3 address entries resolved"},
		{"failed", down, "False", v1alpha1.MetalAPIUnavailableReason, "reading VRF v1: 503; PacketCluster ns/pc not found (spec.networkRef)"},
		{"failed, serving stale addresses", sourcesFailed{reason: v1alpha1.InvalidCredentialsReason, messages: []string{"refused"}, stale: true, lastSync: &at},
			"False", v1alpha1.InvalidCredentialsReason, "refused; serving the addresses resolved at 2026-03-01T12:00:00Z, which may be stale"},
		{"failed, serving stale addresses of no complete resolution", sourcesFailed{reason: v1alpha1.InvalidCredentialsReason, messages: []string{"refused"}, stale: true},
			"False", v1alpha1.InvalidCredentialsReason, "refused; serving the addresses resolved before, which may be stale"},
		{"a fact of Ready", waitingForRelease{}, "Unknown", "UnknownFact", "controllers.waitingForRelease"},
	})
	counted := func(free int64, change func(*poolCounted)) poolCounted {
		f := poolCounted{stats: registry.Stats{Total: big.NewInt(254), Free: big.NewInt(free)}}
		change(&f)
		return f
	}
	checkConditions(t, poolReady, []conditionCase{
		{"allocates elsewhere", counted(0, func(f *poolCounted) { f.stats.Elsewhere = errors.New("management cluster a allocates") }),
			"False", v1alpha1.AllocatesElsewhereReason, "management cluster a allocates"},
		{"handed over", counted(0, func(f *poolCounted) { f.handedOver, f.stats.Elsewhere = true, errors.New("handed over") }),
			"False", v1alpha1.HandedOverReason, "handed over"},
		{"sources gave nothing", counted(0, func(f *poolCounted) { f.stats.SpaceErr, f.unresolved = errors.New("no addresses"), &down }),
			"False", v1alpha1.SourcesNotResolvedReason, "No address to hand out: reading VRF v1: 503; PacketCluster ns/pc not found (spec.networkRef)"},
		{"invalid spec", counted(0, func(f *poolCounted) {
			f.stats.SpaceErr = errors.New(`spec.addresses[0]: Invalid value: "x": not an address`)
		}),
			"False", v1alpha1.InvalidSpecReason, `spec.addresses[0]: Invalid value: "x": not an address`},
		{"exhausted", counted(0, func(*poolCounted) {}), "False", v1alpha1.ExhaustedReason,
			"All 254 addresses are in use; waiting claims are served as addresses are released"},
		{"a prefix pool exhausted", counted(0, func(f *poolCounted) { f.stats.PrefixLength = 64 }), "False", v1alpha1.ExhaustedReason,
			"All 254 /64 prefixes are in use; waiting claims are served as prefixes are released"},
		{"serving", counted(1, func(*poolCounted) {}), "True", v1alpha1.ReadyReason, "The pool serves claims"},
		{"serving with notes", counted(1, func(f *poolCounted) {
			f.foreignVRF, f.stats.Retired, f.handOverWaits, f.idleExclusions = "v1", 2, map[string]int{"b": 1, "a": 3}, idle
		}), "True", v1alpha1.ReadyReason, "The pool serves claims; other pools of VRF v1 hold some of its addresses; " +
			"2 addresses whose IPAddresses were left without their claims (moved to another management cluster) are kept out of use; " +
			"the hand-over waits for the claims here to move: 3 in namespace a, 1 in namespace b; " +
			`but spec.excludedAddresses[0]: Invalid value: "10.9.0.1": lies outside the pool's addresses: it excludes nothing`},
		{"deleting", waitingForRelease{4}, "False", poolDeletingReason, "Waiting for 4 IPAddresses to be released before the pool is deleted"},
		{"a fact of SourcesResolved", noSources{}, "Unknown", "UnknownFact", "controllers.noSources"},
	})
}

// A pool without sources loses its SourcesResolved condition; a condition
// whose phase recorded nothing keeps its last value.
func TestSetPoolStatus(t *testing.T) {
	pool := &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	setPoolStatus(pool, poolFacts{sources: sourcesResolved{1}, ready: poolCounted{stats: registry.Stats{Total: big.NewInt(1), Free: big.NewInt(1)}}})
	setPoolStatus(pool, poolFacts{})
	if !conditions.IsTrue(pool, v1alpha1.SourcesResolvedCondition) || !conditions.IsTrue(pool, v1alpha1.ReadyCondition) {
		t.Fatalf("conditions = %+v, want both True", pool.Status.Conditions)
	}
	if c := conditions.Get(pool, v1alpha1.ReadyCondition); c.ObservedGeneration != 2 {
		t.Errorf("Ready observed generation %d, want 2", c.ObservedGeneration)
	}
	setPoolStatus(pool, poolFacts{sources: noSources{}})
	if conditions.Has(pool, v1alpha1.SourcesResolvedCondition) {
		t.Errorf("a pool without sources keeps SourcesResolved: %+v", pool.Status.Conditions)
	}
}
