package webhooks

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/pkg/ipamutil"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// +kubebuilder:webhook:path=/validate-ipam-cluster-x-k8s-io-v1beta2-ipaddressclaim,mutating=false,failurePolicy=fail,sideEffects=None,groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims,verbs=update,versions=v1beta2,name=release.ipaddressclaim.metal-vrf.ipam.cluster.x-k8s.io,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10

// releasePath serves releaseGuard.
const releasePath = "/validate-ipam-cluster-x-k8s-io-v1beta2-ipaddressclaim"

// releaseGuard keeps the release finalizer on a claim of our pools unless
// whoever removes it may assign the pool's addresses (assigners). Without
// the finalizer the claim goes without its release, and its IPAddress is
// left without a claim, which is what clusterctl move leaves of a global
// pool on the source: the manager then retires the address there for good
// (see the address reconciler's clusterMoved). Move runs as an
// administrator; a tenant removing the finalizers of its own claims could
// otherwise drain a pool other namespaces share, one retired address per
// claim it was served. The manager removes the finalizer itself once the
// address is released. config/ipam/default narrows the webhook to updates
// that remove the finalizer; here every other update is let through too.
type releaseGuard struct {
	pools
	decoder admission.Decoder
	assigners
}

// Handle admits an update of an IPAddressClaim.
func (g *releaseGuard) Handle(ctx context.Context, req admission.Request) admission.Response {
	claim, old := &ipamv1.IPAddressClaim{}, &ipamv1.IPAddressClaim{}
	if err := g.decoder.Decode(req, claim); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if err := g.decoder.DecodeRaw(req.OldObject, old); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !slices.Contains(old.Finalizers, ipamutil.ReleaseAddressFinalizer) || slices.Contains(claim.Finalizers, ipamutil.ReleaseAddressFinalizer) {
		return admission.Allowed("the release finalizer is kept")
	}
	key, ok, err := g.served(ctx, claim.Spec.PoolRef, claim.Namespace)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	} else if !ok {
		return admission.Allowed("not a claim of a pool this provider serves")
	}
	var refused *field.Error
	err = g.authorize(ctx, req.UserInfo, key, "remove the release finalizer "+ipamutil.ReleaseAddressFinalizer+" of claims of",
		field.NewPath("metadata", "finalizers"))
	switch {
	case errors.As(err, &refused):
		return admission.Denied(refused.Error() + "; delete the claim and the manager releases its address, then removes the finalizer")
	case err != nil:
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.Allowed("")
}
