package records

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// Mark makes the domain's marker say what registry.Marked says it must once
// a writer of span length bits marked it: one live GET when it says so
// already, else a create, or a patch on the resourceVersion read (a
// concurrent change is read again). It is not fenced: any writer marks, and
// a stale one only makes a domain mixed.
func (s *Store) Mark(ctx context.Context, domain string, bits int) (bool, error) {
	key := client.ObjectKey{Namespace: s.namespace, Name: domainHash(domain) + ".spans"}
	for {
		marker := &coordinationv1.Lease{}
		err := s.reader.Get(ctx, key, marker)
		if err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		found := err == nil
		said := marker.Annotations[v1alpha1.AllocationSpansAnnotation]
		if found && said == "" {
			said = registry.Mixed // not one we wrote: take it for the safe side
		}
		next, mixed := registry.Marked(said, bits)
		switch {
		case found && next == said:
			return mixed, nil
		case found:
			patch := client.MergeFromWithOptions(marker.DeepCopy(), client.MergeFromWithOptimisticLock{})
			marker.Annotations[v1alpha1.AllocationSpansAnnotation] = next
			err = s.client.Patch(ctx, marker, patch)
		default:
			err = s.client.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
				Namespace: key.Namespace, Name: key.Name,
				Labels:      map[string]string{v1alpha1.AllocationMarkerLabel: domainHash(domain)},
				Annotations: map[string]string{v1alpha1.AllocationDomainAnnotation: domain, v1alpha1.AllocationSpansAnnotation: next},
			}})
		}
		if err == nil {
			return mixed, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && !apierrors.IsAlreadyExists(err) {
			return false, err
		}
	}
}
