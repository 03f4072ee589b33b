package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"

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
		if allocating == "" {
			elsewhere, err := r.allocatedElsewhere(ctx, pool)
			if err != nil {
				return nil, err
			}
			if elsewhere != nil {
				r.recorder.Eventf(pool, nil, corev1.EventTypeWarning, v1alpha1.AllocatorInDoubtReason, "Allocate",
					"IPAddress %s/%s (%s) was handed out by management cluster %s (annotation %s): this copy names no allocating cluster and hands out nothing; re-create it with the annotations %s and %s of the copy in the cluster that allocates (docs/reliability.md, \"One allocating copy of a global pool\")",
					elsewhere.Namespace, elsewhere.Name, elsewhere.Spec.Address, elsewhere.Annotations[v1alpha1.AllocatedInAnnotation], v1alpha1.AllocatedInAnnotation,
					v1alpha1.AllocatingClusterAnnotation, v1alpha1.HandoverHashAnnotation)
				return nil, nil
			}
		}
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

// allocatedElsewhere returns an IPAddress of the pool that another
// management cluster handed out, or nil. A copy that names no allocating
// cluster must not name itself when one exists: the copy was re-created (by
// GitOps, without the annotations the manager wrote) in a cluster that
// keeps another's addresses, or the addresses came in by a move or a
// restore before the copy's first reconcile. The copy that allocates is
// elsewhere, and only an administrator knows which; a copy naming itself
// would hand out its addresses a second time. Read from the cache: the
// IPAddresses of a re-created copy were there long before it. It costs one
// pass over the IPAddresses, only while the copy names no cluster.
func (r *poolReconciler) allocatedElsewhere(ctx context.Context, pool v1alpha1.Pool) (*ipamv1.IPAddress, error) {
	list := &ipamv1.IPAddressList{}
	if err := r.client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing the IPAddresses of %s: %w", pool.GetName(), err)
	}
	for i := range list.Items {
		a := &list.Items[i]
		if by := a.Annotations[v1alpha1.AllocatedInAnnotation]; by != "" && by != r.cluster && poolref.AddressBelongsTo(a, pool) {
			return a, nil
		}
	}
	return nil, nil
}

// stampAllocatedIn names, on a new IPAddress of a GlobalMetalVRFIPPool, the
// management cluster that handed its address out: the pool's allocating
// cluster, since the registry handed it out here. Copies elsewhere judge by
// it which cluster allocates (see v1alpha1.AllocatedInAnnotation).
func stampAllocatedIn(address *ipamv1.IPAddress, pool v1alpha1.Pool) {
	if poolref.KindOf(pool) != v1alpha1.GlobalMetalVRFIPPoolKind {
		return
	}
	if allocating := pool.GetAnnotations()[v1alpha1.AllocatingClusterAnnotation]; allocating != "" {
		metav1.SetMetaDataAnnotation(&address.ObjectMeta, v1alpha1.AllocatedInAnnotation, allocating)
	}
}
