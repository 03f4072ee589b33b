package controllers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// reconcileAllocator keeps a GlobalMetalVRFIPPool's allocating cluster (see
// v1alpha1.AllocatingClusterAnnotation): it names this management cluster
// on a pool that names none, hands the pool over when asked and nothing
// here holds its addresses any more, and takes over a copy whose hand-over
// token it is given. It returns what the pool's Ready condition must add
// about a hand-over that waits, if anything.
func (r *poolReconciler) reconcileAllocator(ctx context.Context, pool v1alpha1.Pool) (string, error) {
	if poolref.KindOf(pool) != v1alpha1.GlobalMetalVRFIPPoolKind {
		return "", nil
	}
	annotations := pool.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	defer pool.SetAnnotations(annotations)
	allocating := annotations[v1alpha1.AllocatingClusterAnnotation]
	_, handOver := annotations[v1alpha1.HandOverAnnotation]
	_, handedOver := annotations[v1alpha1.HandoverTokenAnnotation]
	takeOver, takingOver := annotations[v1alpha1.TakeOverAnnotation]
	switch {
	case allocating == "":
		annotations[v1alpha1.AllocatingClusterAnnotation] = r.cluster
	case allocating == r.cluster && handOver && !handedOver:
		holders, err := r.registry.HandOver(ctx, pool)
		if err != nil {
			return "", err
		}
		if len(holders) > 0 {
			return "; the hand-over waits for the claims here to move: " + countByNamespace(holders), nil
		}
		token, err := handoverToken(r.cluster)
		if err != nil {
			return "", err
		}
		annotations[v1alpha1.HandoverTokenAnnotation] = token
		r.recorder.Eventf(pool, nil, corev1.EventTypeNormal, v1alpha1.HandedOverReason, "HandOver",
			"No claim here holds an address of the pool: handed over with token %s, and hands out nothing more here", token)
	case allocating != r.cluster && takingOver:
		delete(annotations, v1alpha1.TakeOverAnnotation)
		if !strings.HasPrefix(takeOver, allocating+".") {
			r.recorder.Eventf(pool, nil, corev1.EventTypeWarning, "TakeOverRefused", "TakeOver",
				"annotation %s: %q is not a hand-over token of management cluster %s, which allocates from the pool: copy annotation %s of the pool there once it has handed the pool over",
				v1alpha1.TakeOverAnnotation, takeOver, allocating, v1alpha1.HandoverTokenAnnotation)
			return "", nil
		}
		annotations[v1alpha1.AllocatingClusterAnnotation] = r.cluster
		delete(annotations, v1alpha1.HandOverAnnotation)
		delete(annotations, v1alpha1.HandoverTokenAnnotation)
		r.recorder.Eventf(pool, nil, corev1.EventTypeNormal, "TakenOver", "TakeOver",
			"Took the pool over from management cluster %s: it hands out addresses here now", allocating)
	}
	return "", nil
}

// handoverToken is a token of a hand-over by cluster: the cluster's
// identity, which the taking copy checks against its allocating cluster,
// and a random part.
func handoverToken(cluster string) (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making a hand-over token: %w", err)
	}
	return cluster + "." + hex.EncodeToString(b), nil
}

// countByNamespace says how many claims of each namespace hold addresses.
func countByNamespace(holders map[string]int) string {
	var parts []string
	for _, ns := range slices.Sorted(maps.Keys(holders)) {
		parts = append(parts, fmt.Sprintf("%d in namespace %s", holders[ns], ns))
	}
	return strings.Join(parts, ", ")
}
