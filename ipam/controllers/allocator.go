package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// reconcileAllocator keeps a GlobalMetalVRFIPPool's allocating cluster (see
// v1alpha1.AllocatingClusterAnnotation): it names this management cluster,
// with the hash of the pool's hand-over token, on a pool that names none;
// hands the pool over when asked and nothing here holds its addresses any
// more; and takes over a copy given the token of its hash. It returns, by
// namespace, the claims here that a hand-over waits for.
func (r *poolReconciler) reconcileAllocator(ctx context.Context, pool v1alpha1.Pool) (map[string]int, error) {
	if poolref.KindOf(pool) != v1alpha1.GlobalMetalVRFIPPoolKind {
		return nil, nil
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
	case allocating == "" || allocating == r.cluster && annotations[v1alpha1.HandoverHashAnnotation] == "":
		// A pool just taken over (see below) has no hash: it gets a token
		// of this cluster's own.
		token, err := r.tokens.token(ctx, pool)
		if err != nil {
			return nil, err
		}
		annotations[v1alpha1.AllocatingClusterAnnotation] = r.cluster
		annotations[v1alpha1.HandoverHashAnnotation] = hashOf(token)
	case allocating == r.cluster && handOver && !handedOver:
		holders, err := r.registry.HandOver(ctx, pool)
		if err != nil {
			return nil, err
		}
		if len(holders) > 0 {
			return holders, nil
		}
		secret := r.tokens.secretKey(pool).String()
		annotations[v1alpha1.HandoverTokenAnnotation] = secret
		r.recorder.Eventf(pool, nil, corev1.EventTypeNormal, v1alpha1.HandedOverReason, "HandOver",
			"No claim here holds an address of the pool: handed over, and hands out nothing more here; the token the copy elsewhere takes over with is key %s of secret %s",
			v1alpha1.HandoverTokenKey, secret)
	case allocating != r.cluster && takingOver:
		delete(annotations, v1alpha1.TakeOverAnnotation)
		if err := checkToken(annotations, takeOver); err != nil {
			// The value is not repeated: it may be a token of something else.
			r.recorder.Eventf(pool, nil, corev1.EventTypeWarning, "TakeOverRefused", "TakeOver",
				"annotation %s refused: %v; set it to key %s of the Secret that annotation %s of the pool in management cluster %s names once that cluster has handed the pool over",
				v1alpha1.TakeOverAnnotation, err, v1alpha1.HandoverTokenKey, v1alpha1.HandoverTokenAnnotation, allocating)
			return nil, nil
		}
		annotations[v1alpha1.AllocatingClusterAnnotation] = r.cluster
		// The hash was of the source's token, which its administrators know:
		// this cluster stamps a token of its own on the next reconcile.
		for _, key := range []string{v1alpha1.HandOverAnnotation, v1alpha1.HandoverTokenAnnotation, v1alpha1.HandoverHashAnnotation} {
			delete(annotations, key)
		}
		r.recorder.Eventf(pool, nil, corev1.EventTypeNormal, "TakenOver", "TakeOver",
			"Took the pool over from management cluster %s: it hands out addresses here now", allocating)
	}
	return nil, nil
}
