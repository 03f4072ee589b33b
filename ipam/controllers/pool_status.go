package controllers

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// This file derives a pool's conditions from the facts its reconcile
// recorded: pure functions, the one place the reasons and messages of a
// pool are decided. The status fields later phases read (status.resolved,
// the counts) are written by the phases that learn them.

// poolDeletingReason: the pool waits for its addresses to be released before it goes.
const poolDeletingReason = "Deleting"

// poolFacts are the facts of one pool reconcile, one per condition; nil
// when its phase did not run or recorded nothing.
type poolFacts struct {
	sources, ready fact
}

// Facts of the pool's sources (SourcesResolved).
type (
	// noSources: the pool has neither spec.vrf nor spec.networkRef.
	noSources       struct{}
	sourcesResolved struct{ entries int }
	// sourcesFailed: reason is the first failure's, messages each one's;
	// stale when entries of the resolution at lastSync are kept.
	sourcesFailed struct {
		reason   string
		messages []string
		stale    bool
		lastSync *metav1.Time
	}
)

// Facts of whether the pool serves claims (Ready).
type (
	// poolCounted: the registry's counts of the pool, and what else Ready
	// says of it.
	poolCounted struct {
		stats registry.Stats
		// handedOver: the pool names this management cluster as the one
		// that allocates, so stats.Elsewhere means it handed the pool over.
		handedOver bool
		// unresolved is why the sources failed when they resolved nothing.
		unresolved *sourcesFailed
		// foreignVRF is the pool's VRF when other pools of it hold some of
		// its addresses.
		foreignVRF string
		// handOverWaits counts by namespace the claims here that hold
		// addresses a hand-over waits for.
		handOverWaits                      map[string]int
		idleExclusions, idlePreAllocations field.ErrorList
	}
	// waitingForRelease: the deleted pool waits for its addresses in use.
	waitingForRelease struct{ used int64 }
)

// setPoolStatus writes the conditions the facts say; a condition without
// a fact keeps its last value.
func setPoolStatus(pool v1alpha1.Pool, f poolFacts) {
	switch f.sources.(type) {
	case nil:
	case noSources:
		conditions.Delete(pool, v1alpha1.SourcesResolvedCondition)
	default:
		setCondition(pool, sourcesResolvedCondition(f.sources))
	}
	if f.ready != nil {
		setCondition(pool, poolReady(f.ready))
	}
}

func sourcesResolvedCondition(f fact) metav1.Condition {
	const t = v1alpha1.SourcesResolvedCondition
	switch f := f.(type) {
	case sourcesResolved:
		return trueCondition(t, v1alpha1.SourcesResolvedReason, fmt.Sprintf("%d address entries resolved", f.entries))
	case sourcesFailed:
		return falseCondition(t, f.reason, f.message())
	}
	return unknownFact(t, f)
}

// message joins the failures and says when the addresses served are
// stale; it is bounded here because Ready quotes it.
func (f sourcesFailed) message() string {
	text := strings.Join(f.messages, "; ")
	switch {
	case f.stale && f.lastSync == nil:
		// Kept from a resolution that never completed: no time to name.
		text += "; serving the addresses resolved before, which may be stale"
	case f.stale:
		text += fmt.Sprintf("; serving the addresses resolved at %s, which may be stale", f.lastSync.UTC().Format(time.RFC3339))
	}
	return message.Bound(text)
}

func poolReady(f fact) metav1.Condition {
	const t = v1alpha1.ReadyCondition
	switch f := f.(type) {
	case poolCounted:
		return poolCountedCondition(f)
	case waitingForRelease:
		return falseCondition(t, poolDeletingReason, fmt.Sprintf("Waiting for %d IPAddresses to be released before the pool is deleted", f.used))
	}
	return unknownFact(t, f)
}

func poolCountedCondition(f poolCounted) metav1.Condition {
	const t = v1alpha1.ReadyCondition
	switch stats := f.stats; {
	case stats.Elsewhere != nil && f.handedOver:
		return falseCondition(t, v1alpha1.HandedOverReason, stats.Elsewhere.Error())
	case stats.Elsewhere != nil:
		return falseCondition(t, v1alpha1.AllocatesElsewhereReason, stats.Elsewhere.Error())
	case stats.SpaceErr != nil && f.unresolved != nil:
		// It says why the sources failed, not what an empty spec lacks.
		return falseCondition(t, v1alpha1.SourcesNotResolvedReason, "No address to hand out: "+f.unresolved.message())
	case stats.SpaceErr != nil:
		return falseCondition(t, v1alpha1.InvalidSpecReason, stats.SpaceErr.Error())
	case stats.Free.Sign() == 0 && stats.PrefixLength > 0:
		return falseCondition(t, v1alpha1.ExhaustedReason,
			fmt.Sprintf("All %s /%d prefixes are in use; waiting claims are served as prefixes are released", stats.Total, stats.PrefixLength))
	case stats.Free.Sign() == 0:
		return falseCondition(t, v1alpha1.ExhaustedReason,
			fmt.Sprintf("All %s addresses are in use; waiting claims are served as addresses are released", stats.Total))
	}
	// The counts live in status.ipAddresses: a message that repeated them
	// would cost a second write on every allocation.
	text := "The pool serves claims"
	if f.foreignVRF != "" {
		text += fmt.Sprintf("; other pools of VRF %s hold some of its addresses", f.foreignVRF)
	}
	if f.stats.Retired > 0 {
		text += fmt.Sprintf("; %d addresses whose IPAddresses were left without their claims (moved to another management cluster) are kept out of use", f.stats.Retired)
	}
	if len(f.handOverWaits) > 0 {
		text += "; the hand-over waits for the claims here to move: " + countByNamespace(f.handOverWaits)
	}
	// An exclusion outside what the sources gave is likely a typo, but the
	// sources may grow into it: it is said, not refused.
	if len(f.idleExclusions) > 0 {
		text += "; but " + f.idleExclusions.ToAggregate().Error()
	}
	if len(f.idlePreAllocations) > 0 {
		text += "; but " + f.idlePreAllocations.ToAggregate().Error()
	}
	return trueCondition(t, v1alpha1.ReadyReason, text)
}

// countByNamespace says how many claims of each namespace hold addresses.
func countByNamespace(holders map[string]int) string {
	var parts []string
	for _, ns := range slices.Sorted(maps.Keys(holders)) {
		parts = append(parts, fmt.Sprintf("%d in namespace %s", holders[ns], ns))
	}
	return strings.Join(parts, ", ")
}
