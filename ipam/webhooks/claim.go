package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/records"
)

// +kubebuilder:webhook:path=/validate-ipam-cluster-x-k8s-io-v1beta2-ipaddressclaim,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims,verbs=delete,versions=v1beta2,name=move.ipaddressclaim.metal-vrf.ipam.cluster.x-k8s.io,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10

// movePath serves moveMarker.
const movePath = "/validate-ipam-cluster-x-k8s-io-v1beta2-ipaddressclaim"

// moveMarker tells clusterctl move apart from any other deletion of a
// claim of a global pool, as the claim goes. Move deletes the claims of
// the Cluster it moves (annotated delete-for-move first) and leaves a global
// pool's IPAddresses on the source, without their claims; the target holds
// their addresses from then on, so the source must retire them, never free
// them. A claim gets no finalizer (see the claim reconciler), so nothing
// of the deletion is left to read once the claim is gone: this webhook
// marks the claim's IPAddress with v1alpha1.MovedAnnotation before the API
// server deletes it, when the deleting user may assign the pool's addresses
// (administrators, who run move). Any other deletion, a tenant's with
// delete-for-move written by hand included, leaves no mark and its address
// is freed: no one retires a shared pool's addresses for good without the
// verb. It never refuses a deletion but when it cannot decide.
// config/ipam/default narrows it to deletions of claims annotated
// delete-for-move, by anyone but the manager.
type moveMarker struct {
	pools
	decoder admission.Decoder
	assigners
	// writer marks the IPAddress.
	writer client.Writer
}

// Handle admits the deletion of an IPAddressClaim.
func (m *moveMarker) Handle(ctx context.Context, req admission.Request) admission.Response {
	claim := &ipamv1.IPAddressClaim{}
	if err := m.decoder.DecodeRaw(req.OldObject, claim); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if _, moving := claim.Annotations[clusterctlv1.DeleteForMoveAnnotation]; !moving {
		return admission.Allowed("not deleted by clusterctl move")
	}
	key, ok, err := m.served(ctx, claim.Spec.PoolRef, claim.Namespace)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	} else if !ok || key.Kind != v1alpha1.GlobalMetalVRFIPPoolKind {
		return admission.Allowed("not a claim of a global pool this provider serves")
	}
	var refused *field.Error
	err = m.authorize(ctx, req.UserInfo, key, "move the addresses of",
		field.NewPath("metadata", "annotations").Key(clusterctlv1.DeleteForMoveAnnotation))
	switch {
	case errors.As(err, &refused):
		return admission.Allowed("deleted by a user who may not move the pool's addresses: its address is freed")
	case err != nil:
		return admission.Errored(http.StatusInternalServerError, err)
	case ptr.Deref(req.DryRun, false):
		return admission.Allowed("dry run: nothing marked")
	}
	if err := m.mark(ctx, claim); err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.Allowed("")
}

// mark sets v1alpha1.MovedAnnotation on the claim's IPAddress, named after
// the claim, if it is the claim's.
func (m *moveMarker) mark(ctx context.Context, claim *ipamv1.IPAddressClaim) error {
	address := &ipamv1.IPAddress{}
	err := m.live.Get(ctx, client.ObjectKeyFromObject(claim), address)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("reading the IPAddress of claim %s: %w", claim.Name, err)
	}
	if uid, named := records.ClaimUID(address); named && uid != claim.UID {
		return nil // another claim's of the same name
	}
	if address.Annotations[v1alpha1.MovedAnnotation] == string(claim.UID) {
		return nil
	}
	patch := client.MergeFromWithOptions(address.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if address.Annotations == nil {
		address.Annotations = map[string]string{}
	}
	address.Annotations[v1alpha1.MovedAnnotation] = string(claim.UID)
	if err := m.writer.Patch(ctx, address, patch); err != nil {
		return fmt.Errorf("marking IPAddress %s moved: %w", address.Name, err)
	}
	return nil
}
