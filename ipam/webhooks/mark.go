package webhooks

import (
	"context"
	"errors"
	"net/http"

	"k8s.io/apimachinery/pkg/util/validation/field"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-ipam-cluster-x-k8s-io-v1beta2-ipaddress-mark,mutating=false,failurePolicy=fail,sideEffects=None,groups=ipam.cluster.x-k8s.io,resources=ipaddresses,verbs=update,versions=v1beta2,name=mark.ipaddress.metal-vrf.ipam.cluster.x-k8s.io,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10

// markPath serves markGuard.
const markPath = "/validate-ipam-cluster-x-k8s-io-v1beta2-ipaddress-mark"

// markGuard keeps v1alpha1.MovedAnnotation the manager's: whoever sets,
// changes or removes it on an IPAddress of our pools needs AssignVerb on
// the pool. A mark retires the address for good once the Cluster is gone
// (see moveMarker); a tenant marking its own IPAddresses, then deleting its
// Cluster and claims, would drain a pool other namespaces share.
// config/ipam/default narrows the webhook to updates that change the mark,
// by anyone but the manager.
type markGuard struct {
	pools
	decoder admission.Decoder
	assigners
}

// Handle admits an update of an IPAddress.
func (g *markGuard) Handle(ctx context.Context, req admission.Request) admission.Response {
	address, old := &ipamv1.IPAddress{}, &ipamv1.IPAddress{}
	if err := g.decoder.Decode(req, address); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if err := g.decoder.DecodeRaw(req.OldObject, old); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	mark, was := address.Annotations[v1alpha1.MovedAnnotation]
	oldMark, had := old.Annotations[v1alpha1.MovedAnnotation]
	if mark == oldMark && was == had {
		return admission.Allowed("the mark of a move is unchanged")
	}
	key, ok, err := g.served(ctx, address.Spec.PoolRef, address.Namespace)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	} else if !ok {
		return admission.Allowed("not an address of a pool this provider serves")
	}
	var refused *field.Error
	err = g.authorize(ctx, req.UserInfo, key, "mark as moved IPAddresses of",
		field.NewPath("metadata", "annotations").Key(v1alpha1.MovedAnnotation))
	switch {
	case errors.As(err, &refused):
		return admission.Denied(refused.Error())
	case err != nil:
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.Allowed("")
}
