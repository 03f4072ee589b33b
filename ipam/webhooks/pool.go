// Package webhooks validates pools before they reach the API server, with the
// same rules the controllers apply (ipam/internal/poolspace), plus the rules
// that need the cluster's state: an update must keep every address in use,
// and a pool with addresses in use cannot be deleted.
package webhooks

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
)

// +kubebuilder:webhook:path=/validate-ipam-cluster-x-k8s-io-v1alpha1-metalvrfippool,mutating=false,failurePolicy=fail,sideEffects=None,groups=ipam.cluster.x-k8s.io,resources=metalvrfippools,verbs=create;update;delete,versions=v1alpha1,name=validation.metalvrfippool.ipam.cluster.x-k8s.io,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-ipam-cluster-x-k8s-io-v1alpha1-globalmetalvrfippool,mutating=false,failurePolicy=fail,sideEffects=None,groups=ipam.cluster.x-k8s.io,resources=globalmetalvrfippools,verbs=create;update;delete,versions=v1alpha1,name=validation.globalmetalvrfippool.ipam.cluster.x-k8s.io,admissionReviewVersions=v1

// maxListed bounds how many offending addresses a rejection spells out.
const maxListed = 5

// SetupWithManager registers the validating webhooks of both pool kinds,
// the one that records the addresses of IPAddresses others create through
// reg, and the two that tell clusterctl move's deletion of a claim apart
// from any other (moveMarker, markGuard).
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, reg *registry.Registry) error {
	manager, err := whoAmI(ctx, mgr.GetClient())
	if err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &v1alpha1.MetalVRFIPPool{}).
		WithValidator(&poolValidator[*v1alpha1.MetalVRFIPPool]{client: mgr.GetClient(), manager: manager}).
		Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &v1alpha1.GlobalMetalVRFIPPool{}).
		WithValidator(&poolValidator[*v1alpha1.GlobalMetalVRFIPPool]{client: mgr.GetClient(), manager: manager}).
		Complete(); err != nil {
		return err
	}
	mgr.GetWebhookServer().Register(addressPath, &webhook.Admission{Handler: &addressRecorder{
		pools: pools{client: mgr.GetClient(), live: mgr.GetAPIReader()}, registry: reg, decoder: admission.NewDecoder(mgr.GetScheme()),
		assigners: assigners{authorizer: mgr.GetClient(), manager: manager},
	}})
	mgr.GetWebhookServer().Register(movePath, &webhook.Admission{Handler: &moveMarker{
		pools: pools{client: mgr.GetClient(), live: mgr.GetAPIReader()}, decoder: admission.NewDecoder(mgr.GetScheme()),
		assigners: assigners{authorizer: mgr.GetClient(), manager: manager}, writer: mgr.GetClient(),
	}})
	mgr.GetWebhookServer().Register(markPath, &webhook.Admission{Handler: &markGuard{
		pools: pools{client: mgr.GetClient(), live: mgr.GetAPIReader()}, decoder: admission.NewDecoder(mgr.GetScheme()),
		assigners: assigners{authorizer: mgr.GetClient(), manager: manager},
	}})
	return nil
}

// poolValidator validates one pool kind.
type poolValidator[T v1alpha1.Pool] struct {
	client client.Reader
	// manager is the user the manager's requests come as (its
	// ServiceAccount), the only one that may change where a pool allocates.
	manager string
}

// ValidateCreate admits a pool whose spec is valid; one with only explicit
// addresses must also resolve to an address space.
func (v *poolValidator[T]) ValidateCreate(_ context.Context, pool T) (admission.Warnings, error) {
	return nil, invalid(pool, poolspace.Validate(pool))
}

// ValidateUpdate also requires every address in use to stay in the space:
// an IPAddress cannot be taken back from a running machine. The space is the
// new spec with the sources the pool last resolved; when the update changes
// the sources themselves (spec.vrf, spec.networkRef), what they will give is
// unknown here, and addresses in use that they no longer give are kept as
// out of range by the controllers instead.
func (v *poolValidator[T]) ValidateUpdate(ctx context.Context, old, pool T) (admission.Warnings, error) {
	if err := v.keepAllocator(ctx, old, pool); err != nil {
		return nil, err
	}
	if errs := poolspace.Validate(pool); len(errs) > 0 {
		return nil, invalid(pool, errs)
	}
	if vrfID(old) != vrfID(pool) {
		return nil, v.refuseWhileInUse(ctx, pool, field.NewPath("spec", "vrf", "id"),
			"cannot change while addresses of the pool are in use: the pools of a VRF coordinate what they hand out, so the addresses would be left to the old VRF's other pools")
	}
	if !equality.Semantic.DeepEqual(old.PoolSpec().VRF, pool.PoolSpec().VRF) ||
		!equality.Semantic.DeepEqual(old.PoolSpec().NetworkRef, pool.PoolSpec().NetworkRef) {
		return nil, nil
	}
	space, errs := poolspace.Resolve(pool.PoolSpec(), old.PoolStatus().Resolved)
	if len(errs) > 0 {
		return nil, nil // sources not resolved yet: nothing can be in use from them
	}
	inUse, err := v.addressesOf(ctx, pool)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	// Each address dropped is blamed on the field that now keeps it out, so
	// the message names the field the user changed.
	dropped := map[string][]ipamv1.IPAddress{}
	var fields []string
	for _, address := range inUse {
		ip, err := netip.ParseAddr(address.Spec.Address)
		if err != nil || space.Contains(ip) {
			continue
		}
		why, ok := poolspace.WhyUnavailable(pool.PoolSpec(), old.PoolStatus().Resolved, ip)
		path := "spec.addresses"
		if ok {
			path = why.Field
		}
		if why.Reserved && old.PoolSpec().AllocateReservedIPAddresses && !pool.PoolSpec().AllocateReservedIPAddresses {
			path = "spec.allocateReservedIPAddresses"
		}
		if _, seen := dropped[path]; !seen {
			fields = append(fields, path)
		}
		dropped[path] = append(dropped[path], address)
	}
	var forbidden field.ErrorList
	for _, path := range fields {
		forbidden = append(forbidden, &field.Error{Type: field.ErrorTypeForbidden, Field: path,
			Detail: fmt.Sprintf("the update takes %d addresses in use out of the pool: %s", len(dropped[path]), listSome(describe(dropped[path])))})
	}
	return nil, invalid(pool, forbidden)
}

// refuseWhileInUse forbids a change at path while the pool has addresses in use.
func (v *poolValidator[T]) refuseWhileInUse(ctx context.Context, pool T, path *field.Path, why string) error {
	inUse, err := v.addressesOf(ctx, pool)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if len(inUse) == 0 {
		return nil
	}
	return invalid(pool, field.ErrorList{field.Forbidden(path,
		fmt.Sprintf("%s; %d in use: %s", why, len(inUse), listSome(describe(inUse))))})
}

// vrfID is the VRF a pool draws from, or "" for none.
func vrfID(pool v1alpha1.Pool) string {
	if vrf := pool.PoolSpec().VRF; vrf != nil {
		return vrf.ID
	}
	return ""
}

// ValidateDelete refuses to delete a pool with addresses in use, unless
// clusterctl move or an admin's skip annotation says they live on elsewhere.
func (v *poolValidator[T]) ValidateDelete(ctx context.Context, pool T) (admission.Warnings, error) {
	annotations := pool.GetAnnotations()
	if _, skip := annotations[v1alpha1.SkipDeleteValidationAnnotation]; skip {
		return nil, nil
	}
	if _, move := annotations[clusterctlv1.DeleteForMoveAnnotation]; move {
		return nil, nil
	}
	inUse, err := v.addressesOf(ctx, pool)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if len(inUse) == 0 {
		return nil, nil
	}
	return nil, apierrors.NewForbidden(v1alpha1.GroupVersion.WithResource(strings.ToLower(poolref.KindOf(pool))+"s").GroupResource(), pool.GetName(),
		fmt.Errorf("%d addresses of the pool are in use: %s; release their claims first, or set the annotation %s to delete anyway",
			len(inUse), listSome(describe(inUse)), v1alpha1.SkipDeleteValidationAnnotation))
}

// addressesOf lists the IPAddresses allocated from pool.
func (v *poolValidator[T]) addressesOf(ctx context.Context, pool T) ([]ipamv1.IPAddress, error) {
	var list ipamv1.IPAddressList
	if err := v.client.List(ctx, &list, client.InNamespace(pool.GetNamespace())); err != nil {
		return nil, fmt.Errorf("listing IPAddresses: %w", err)
	}
	var owned []ipamv1.IPAddress
	for i := range list.Items {
		if poolref.AddressBelongsTo(&list.Items[i], pool) {
			owned = append(owned, list.Items[i])
		}
	}
	return owned, nil
}

func invalid(pool v1alpha1.Pool, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind(poolref.KindOf(pool)).GroupKind(), pool.GetName(), errs)
}

// describe names IPAddresses for a message: "10.0.0.5 (IPAddress ns/name)".
func describe(addresses []ipamv1.IPAddress) []string {
	names := make([]string, 0, len(addresses))
	for _, address := range addresses {
		names = append(names, fmt.Sprintf("%s (IPAddress %s/%s)", address.Spec.Address, address.Namespace, address.Name))
	}
	return names
}

// listSome joins the first few items and says how many more there are.
func listSome(items []string) string {
	if len(items) <= maxListed {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:maxListed], ", "), len(items)-maxListed)
}
