package controllers

import (
	"context"
	"fmt"

	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// releaseClaim lets go of a claim its owner no longer needs: it drops the
// owner's protection finalizer and deletes the claim, unless it is being
// deleted already; deleted reports whether this call deleted it. The IPAM
// provider frees the address once the claim is gone.
func releaseClaim(ctx context.Context, c client.Client, claim *ipamv1.IPAddressClaim, protection string) (deleted bool, _ error) {
	base := claim.DeepCopy()
	if controllerutil.RemoveFinalizer(claim, protection) {
		if err := c.Patch(ctx, claim, client.MergeFrom(base)); err != nil {
			return false, fmt.Errorf("releasing IPAddressClaim %s: %w", claim.Name, err)
		}
	}
	if !claim.DeletionTimestamp.IsZero() {
		return false, nil
	}
	if err := c.Delete(ctx, claim); client.IgnoreNotFound(err) != nil {
		return false, fmt.Errorf("deleting IPAddressClaim %s: %w", claim.Name, err)
	}
	return true, nil
}
