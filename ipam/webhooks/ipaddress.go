package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/records"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// +kubebuilder:webhook:path=/validate-ipam-cluster-x-k8s-io-v1beta2-ipaddress,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=ipam.cluster.x-k8s.io,resources=ipaddresses,verbs=create,versions=v1beta2,name=record.ipaddress.metal-vrf.ipam.cluster.x-k8s.io,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10

// addressPath serves addressRecorder.
const addressPath = "/validate-ipam-cluster-x-k8s-io-v1beta2-ipaddress"

// addressRecorder records the address of every IPAddress of our pools
// before the API server creates it, and refuses one whose address another
// claim holds. The provider's own IPAddresses are recorded already when
// they are created; this is for those that others create: clusterctl move
// creates the moved IPAddresses on the target while its manager may be
// serving claims of the same pools, and a restore does the same. Refusing
// there is what keeps an address from being held twice whatever the order.
// config/ipam/webhook narrows the webhook to IPAddresses of our pool kinds,
// so the IPAddresses of other providers never wait on this one.
type addressRecorder struct {
	pools
	registry *registry.Registry
	decoder  admission.Decoder
	// assigners decides who may write an IPAddress of a pool.
	assigners
}

// Handle admits an IPAddress being created.
func (v *addressRecorder) Handle(ctx context.Context, req admission.Request) admission.Response {
	address := &ipamv1.IPAddress{}
	if err := v.decoder.Decode(req, address); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	key, ok, err := v.served(ctx, address.Spec.PoolRef, address.Namespace)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	} else if !ok {
		return admission.Allowed("not an address of a pool this provider serves")
	}
	var refused *field.Error
	if err := v.authorize(ctx, req.UserInfo, key, "create IPAddresses by hand of", field.NewPath("spec", "poolRef")); errors.As(err, &refused) {
		return admission.Denied(refused.Error())
	} else if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	ip, err := netip.ParseAddr(address.Spec.Address)
	if err != nil {
		return admission.Allowed("Cluster API's own validation refuses an address that does not parse")
	}
	pool, err := v.read(ctx, key)
	if apierrors.IsNotFound(err) {
		// Not even in the API server: refused, and retried by clusterctl
		// move, rather than let through unrecorded.
		return admission.Denied(field.NotFound(field.NewPath("spec", "poolRef"), key.String()).Error() + "; retry once the pool exists")
	} else if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	pool.GetObjectKind().SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(key.Kind))
	if refused := allocatedByAnother(pool, address); refused != nil {
		return admission.Denied(refused.Error())
	}
	claim, live, err := v.claimOf(ctx, address, annotations.HasPaused(pool))
	var notTheClaim *claimMismatchError
	switch {
	case errors.As(err, &notTheClaim):
		return admission.Denied(field.Invalid(field.NewPath("metadata", "ownerReferences"), string(notTheClaim.named), notTheClaim.Error()).Error())
	case err != nil:
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if restoring := annotations.HasPaused(pool); restoring {
		if refused := ownersAllGone(address, pool, live); refused != nil {
			return admission.Denied(refused.Error())
		}
	}
	if live != nil {
		// The pins are kept when the claim is known; one that comes after
		// its IPAddress (a restore) is checked when its IPAddress is adopted.
		owner := poolspace.OwnerOf(live.Namespace, live.Annotations)
		if err := poolspace.PinnedElsewhere(pool.PoolSpec(), fmt.Sprintf("%s %q", key.Kind, key.Name), pool.GetNamespace(), ip, owner); err != nil {
			return admission.Denied(field.Invalid(field.NewPath("spec", "address"), address.Spec.Address, err.Error()).Error())
		}
	}
	if ptr.Deref(req.DryRun, false) {
		return admission.Allowed("dry run: nothing recorded")
	}
	err = v.registry.Admit(ctx, pool, claim, ip)
	switch {
	case errors.Is(err, registry.ErrConflict), errors.Is(err, registry.ErrNotInPool):
		return admission.Denied(field.Invalid(field.NewPath("spec", "address"), address.Spec.Address, err.Error()).Error())
	case errors.Is(err, registry.ErrTooManyPending):
		return admission.Denied(field.Invalid(field.NewPath("spec", "claimRef", "name"), address.Spec.ClaimRef.Name, err.Error()).Error())
	case errors.Is(err, registry.ErrPoolNotReady):
		return admission.Denied(field.Invalid(field.NewPath("spec", "poolRef"), key.String(), err.Error()+"; retry once it is").Error())
	}
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.Allowed("")
}

// allocatedByAnother refuses an IPAddress of a GlobalMetalVRFIPPool whose
// address was handed out by another management cluster than the one this
// cluster's copy of the pool names as allocating: the target of a move had
// a copy of its own already (move keeps an existing global object), made
// by GitOps or by hand, which allocated on its own. The two clusters may
// have handed out the same addresses; admitting the moved ones would merge
// two ledgers that never knew of each other into a copy that goes on
// allocating beside the source. A copy that names no allocating cluster
// yet admits it, and then does not name itself (reconcileAllocator).
func allocatedByAnother(pool v1alpha1.Pool, address *ipamv1.IPAddress) *field.Error {
	if poolref.KindOf(pool) != v1alpha1.GlobalMetalVRFIPPoolKind {
		return nil
	}
	by := address.Annotations[v1alpha1.AllocatedInAnnotation]
	allocating := pool.GetAnnotations()[v1alpha1.AllocatingClusterAnnotation]
	if by == "" || allocating == "" || by == allocating {
		return nil
	}
	return field.Invalid(field.NewPath("metadata", "annotations").Key(v1alpha1.AllocatedInAnnotation), by,
		fmt.Sprintf("the address was handed out by management cluster %s, but this cluster's copy of %s %q allocates in management cluster %s (annotation %s): two copies of the pool allocated on their own; delete the copy here, if none of its addresses is in use, so that the copy of %s comes in its place, or hand one over (docs/reliability.md, \"One allocating copy of a global pool\")",
			by, v1alpha1.GlobalMetalVRFIPPoolKind, pool.GetName(), allocating, v1alpha1.AllocatingClusterAnnotation, by))
}

// ownersAllGone refuses, while the pool is paused for a restore, an
// IPAddress whose every owner reference names its claim or its pool under
// a UID that is not theirs (the backup's, kept by the restoring tool):
// Kubernetes' garbage collector deletes an object whose owners are all
// gone as soon as it sees it, before anyone can point the references at
// the restored objects, and the binding would be lost. Refused instead,
// the restore reports it and nothing is recorded; restored without owner
// references (Velero's default) it is kept. An owner of another kind, or
// the live claim or pool, keeps the IPAddress from the collector: those
// are admitted, and the collector strips the stale references.
func ownersAllGone(address *ipamv1.IPAddress, pool v1alpha1.Pool, live *ipamv1.IPAddressClaim) *field.Error {
	if len(address.OwnerReferences) == 0 {
		return nil
	}
	for _, ref := range address.OwnerReferences {
		switch {
		case ref.Kind == "IPAddressClaim" && ref.Name == address.Spec.ClaimRef.Name:
			if live != nil && ref.UID == live.UID {
				return nil
			}
		case ref.Kind == poolref.KindOf(pool) && ref.Name == pool.GetName():
			if ref.UID == pool.GetUID() {
				return nil
			}
		default:
			return nil
		}
	}
	return field.Invalid(field.NewPath("metadata", "ownerReferences"), address.OwnerReferences[0].UID,
		"every owner reference names the claim or the pool under a UID that is not theirs (a backup's): Kubernetes' garbage collector would delete the IPAddress at once, and its binding with it; restore IPAddresses without owner references (Velero's default) and point them at the restored claims (docs/reliability.md, \"Backup and restore\")")
}

// pools reads pools for the webhooks on Cluster API's kinds.
type pools struct {
	client client.Reader
	// live reads a pool the cache has not seen yet: clusterctl move creates
	// a pool, then at once its IPAddresses.
	live client.Reader
}

// read reads a pool from the cache, else live.
func (p pools) read(ctx context.Context, key poolref.Key) (v1alpha1.Pool, error) {
	pool, _ := poolref.New(key.Kind)
	err := p.client.Get(ctx, key.ObjectKey(), pool)
	if apierrors.IsNotFound(err) {
		err = p.live.Get(ctx, key.ObjectKey(), pool)
	}
	return pool, err
}

// served names the pool of this provider that serves ref (of an object in
// namespace), or false when none does: another provider's pool, or an
// in-cluster provider's pool this provider has not adopted (its objects
// are the in-cluster provider's own until then).
func (p pools) served(ctx context.Context, ref ipamv1.IPPoolReference, namespace string) (poolref.Key, bool, error) {
	key, ok := poolref.For(ref, namespace)
	if !ok || !poolref.Adopted(ref) {
		return key, ok, nil
	}
	if _, err := p.read(ctx, key); apierrors.IsNotFound(err) {
		return key, false, nil
	} else if err != nil {
		return key, false, err
	}
	return key, true, nil
}

// claimOf names the claim the IPAddress is created for: the live claim of
// its spec.claimRef (returned too), whose UID its owner reference (which
// clusterctl move rewrites to the claim it created first) must name if it
// names one. With no such claim (yet), the owner reference's UID stands for
// it, and live is nil.
//
// restoring (the pool is paused) lets the owner reference name another UID:
// a restore re-creates the claim with a new UID and, when it keeps owner
// references, the IPAddress with the backup's (admitted only beside a live
// owner, ownersAllGone). Only who may assign the pool's addresses gets here
// (authorize), and the claim reconciler points the owner reference at the
// live claim when the pool is resumed.
func (v *addressRecorder) claimOf(ctx context.Context, address *ipamv1.IPAddress, restoring bool) (registry.Claim, *ipamv1.IPAddressClaim, error) {
	claim := records.AddressClaim(address)
	live := &ipamv1.IPAddressClaim{}
	if err := v.live.Get(ctx, claim.NamespacedName, live); err != nil {
		return claim, nil, client.IgnoreNotFound(err)
	}
	if uid, ok := records.ClaimUID(address); ok && uid != live.UID && !restoring {
		return claim, nil, &claimMismatchError{claim: claim.NamespacedName, named: uid, live: live.UID}
	}
	claim.UID = live.UID
	return claim, live, nil
}

// claimMismatchError: the IPAddress's owner reference names another UID
// than its claim's.
type claimMismatchError struct {
	claim       types.NamespacedName
	named, live types.UID
}

func (e *claimMismatchError) Error() string {
	return fmt.Sprintf("the owner reference names UID %s for IPAddressClaim %s, whose UID is %s: an IPAddress is recorded for the live claim it names only",
		e.named, e.claim, e.live)
}
