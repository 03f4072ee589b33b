package webhooks

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// allocatorAnnotations say where a global pool hands out addresses and
// how it may be taken over (see v1alpha1.AllocatingClusterAnnotation).
// Whoever could change them could make two management clusters allocate
// from one pool: only the manager writes them once the pool exists. A
// create (`clusterctl move` making the copy) keeps what the source wrote.
var allocatorAnnotations = []string{
	v1alpha1.AllocatingClusterAnnotation, v1alpha1.HandoverHashAnnotation, v1alpha1.HandoverTokenAnnotation,
}

// keepAllocator refuses an update by anyone but the manager that changes,
// adds or removes one of allocatorAnnotations.
func (v *poolValidator[T]) keepAllocator(ctx context.Context, old, pool T) error {
	var changed field.ErrorList
	for _, key := range allocatorAnnotations {
		before, had := old.GetAnnotations()[key]
		after, has := pool.GetAnnotations()[key]
		if before != after || had != has {
			changed = append(changed, field.Forbidden(field.NewPath("metadata", "annotations").Key(key),
				fmt.Sprintf("%q (was %q): only the IPAM manager (%s) writes it; hand a pool over with annotations %s and %s",
					after, before, v.manager, v1alpha1.HandOverAnnotation, v1alpha1.TakeOverAnnotation)))
		}
	}
	if len(changed) == 0 {
		return nil
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil || req.UserInfo.Username != v.manager {
		return invalid(pool, changed)
	}
	return nil
}

// whoAmI is the user the API server makes of c's credentials.
func whoAmI(ctx context.Context, c client.Client) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return "", fmt.Errorf("asking the API server who the manager is (SelfSubjectReview): %w", err)
	}
	return review.Status.UserInfo.Username, nil
}
