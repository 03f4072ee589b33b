package webhooks

import (
	"context"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
)

// assigners decides who may hold or let go of a pool's addresses outside
// the claims it serves: the manager, and whoever has v1alpha1.AssignVerb on
// the pool (administrators, who run clusterctl move and restores).
type assigners struct {
	// authorizer asks the API server (a SubjectAccessReview); manager is the
	// manager's own user, who may.
	authorizer client.Writer
	manager    string
}

// authorize says whether user may do what (said in a refusal, e.g. "create
// IPAddresses of" the pool by hand) to the pool key: the manager may,
// anyone else needs v1alpha1.AssignVerb on the pool, which the API server
// decides. Whoever may write IPAddresses or claims in a namespace must not,
// with RBAC's ordinary verbs alone, hold or retire addresses of a pool that
// other namespaces share. It is asked before the pool is read, so that a
// refusal reveals nothing of the pool. A refusal is a *field.Error on path.
func (v *assigners) authorize(ctx context.Context, user authenticationv1.UserInfo, key poolref.Key, what string, path *field.Path) error {
	if user.Username == v.manager {
		return nil
	}
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, values := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(values)
	}
	resource := strings.ToLower(key.Kind) + "s"
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: key.Namespace, Verb: v1alpha1.AssignVerb,
			Group: v1alpha1.GroupVersion.Group, Resource: resource, Name: key.Name,
		},
	}}
	if err := v.authorizer.Create(ctx, review); err != nil {
		return fmt.Errorf("asking the API server whether %s may %s %s (SubjectAccessReview): %w", user.Username, v1alpha1.AssignVerb, key, err)
	}
	if review.Status.Allowed {
		return nil
	}
	return field.Forbidden(path, fmt.Sprintf(
		"user %q may not %s %s: that takes verb %q on %s %q (granted to the IPAM manager and administrators, who run clusterctl move and restores); a claim of the pool is served an address, and released, without it",
		user.Username, what, key, v1alpha1.AssignVerb, resource, key.Name))
}
