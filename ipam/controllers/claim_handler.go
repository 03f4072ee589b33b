package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"sigs.k8s.io/cluster-api-ipam-provider-in-cluster/pkg/ipamutil"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolref"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/records"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// Claim condition reasons beyond CAPI's own.
const (
	// claimBoundReason: the claim holds an address.
	claimBoundReason = "Bound"
	// clusterNotFoundReason: the claim names a Cluster that does not exist.
	clusterNotFoundReason = "ClusterNotFound"
)

// releaseRetryDelay is how long to wait for an IPAddress held by a foreign
// finalizer before checking again whether it is gone.
const releaseRetryDelay = 5 * time.Second

// claimHandler serves one IPAddressClaim for claimReconciler: it
// finds the pool, hands out the address through the registry, and keeps the
// claim's Ready condition saying where the claim stands.
type claimHandler struct {
	*poolAdapter
	claim *ipamv1.IPAddressClaim
	pool  v1alpha1.Pool
}

// fetchPool reads the claim's pool from the cache.
func (h *claimHandler) fetchPool(ctx context.Context) (v1alpha1.Pool, error) {
	key, ok := poolref.For(h.claim.Spec.PoolRef, h.claim.Namespace)
	if !ok {
		return nil, reconcile.TerminalError(fmt.Errorf("claim names pool kind %q, which this provider does not serve", h.claim.Spec.PoolRef.Kind))
	}
	pool, _ := poolref.New(key.Kind)
	if err := h.client.Get(ctx, key.ObjectKey(), pool); err != nil {
		if apierrors.IsNotFound(err) && h.claim.DeletionTimestamp.IsZero() {
			// The pool watch picks the claim up again when the pool appears.
			h.setNotReady(ipamv1.IPAddressClaimReadyPoolNotReadyReason, "%s %q not found", key.Kind, key.Name)
		}
		return nil, err
	}
	pool.GetObjectKind().SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(key.Kind))
	h.pool = pool
	return pool, nil
}

// allocate has the registry hand out the claim's address, the lowest free
// one of the pool (or the one the claim or the pool's pre-allocations ask
// for), and fills the new IPAddress with it.
//
// A claim the pool cannot serve now (exhausted, or a spec that does not
// resolve) fails with a terminal error: that stops the reconciler from
// creating an empty IPAddress and stops controller-runtime from retrying in
// a loop. The claim is picked up again when an address of the pool is
// released or the pool changes (see poolAdapter.setupWithManager).
func (h *claimHandler) allocate(ctx context.Context, address *ipamv1.IPAddress) error {
	if !h.pool.GetDeletionTimestamp().IsZero() {
		err := fmt.Errorf("%s %q is being deleted", poolref.KindOf(h.pool), h.pool.GetName())
		h.setNotReady(ipamv1.IPAddressClaimReadyPoolNotReadyReason, "%v", err)
		return reconcile.TerminalError(err)
	}

	requested, err := h.requestedAddress()
	if err == nil {
		requested, err = h.applyPreAllocations(requested)
	}
	if err != nil {
		h.setNotReady(ipamv1.IPAddressClaimReadyAllocationFailedReason, "%v", err)
		return reconcile.TerminalError(err)
	}
	ip, subnet, err := h.registry.Acquire(ctx, h.pool, h.claimID(), requested)
	switch {
	case errors.Is(err, cidr.ErrExhausted):
		h.setNotReady(ipamv1.IPAddressClaimReadyPoolExhaustedReason,
			"%s %q has no free address; the claim is served as soon as one is released or the pool grows", poolref.KindOf(h.pool), h.pool.GetName())
		h.recorder.Eventf(h.claim, nil, corev1.EventTypeWarning, ipamv1.IPAddressClaimReadyPoolExhaustedReason, "Allocate",
			"%s %q has no free address", poolref.KindOf(h.pool), h.pool.GetName())
		allocationsTotal.WithLabelValues(poolref.KindOf(h.pool), "exhausted").Inc()
		return reconcile.TerminalError(err)
	case errors.Is(err, registry.ErrFenced):
		// Not the claim's problem: this process may not allocate now.
		return err
	case errors.Is(err, registry.ErrRequestedUnavailable):
		h.requestedUnavailable(requested, err)
		return reconcile.TerminalError(err)
	case errors.Is(err, registry.ErrPoolNotReady):
		h.setNotReady(ipamv1.IPAddressClaimReadyPoolNotReadyReason, "%s %q cannot serve claims: %s", poolref.KindOf(h.pool), h.pool.GetName(), h.notReadyBecause(err))
		return reconcile.TerminalError(err)
	case err != nil:
		h.setNotReady(ipamv1.IPAddressClaimReadyAllocationFailedReason, "%v", err)
		allocationsTotal.WithLabelValues(poolref.KindOf(h.pool), "failed").Inc()
		return err
	}

	address.Spec.Address = ip.String()
	address.Spec.Prefix = ptr.To(int32(subnet.Prefix.Bits()))
	if subnet.Gateway.IsValid() {
		address.Spec.Gateway = subnet.Gateway.String()
	}
	annotateDNSServers(address, poolspace.DNSServers(h.pool.PoolSpec(), ip))
	allocationsTotal.WithLabelValues(poolref.KindOf(h.pool), "allocated").Inc()
	h.setBound(address.Spec.Address)
	return nil
}

// adopt binds the claim to the IPAddress it already has, recording its
// address if this process did not hand it out (moved, restored, another
// replica's).
func (h *claimHandler) adopt(ctx context.Context, address *ipamv1.IPAddress) error {
	if err := h.ownsAddress(address); err != nil {
		h.setNotReady(ipamv1.IPAddressClaimReadyAllocationFailedReason, "%v", err)
		return err
	}
	ip, err := netip.ParseAddr(address.Spec.Address)
	if err == nil {
		err = h.registry.Adopt(ctx, h.pool, h.claimID(), ip)
	}
	switch {
	case errors.Is(err, registry.ErrFenced):
		// Not the claim's problem: this process may not allocate now.
		return err
	case err != nil:
		h.setNotReady(ipamv1.IPAddressClaimReadyAllocationFailedReason, "IPAddress %s: %v", address.Name, err)
		return reconcile.TerminalError(err)
	}
	annotateDNSServers(address, poolspace.DNSServers(h.pool.PoolSpec(), ip))
	if h.claim.Status.AddressRef.Name == "" {
		// Bound to an IPAddress it did not get here (moved or restored):
		// no IPAddress event tells the pool its count grew.
		h.releases.counted(ctx, poolref.KeyOf(h.pool))
	}
	h.setBound(address.Spec.Address)
	return nil
}

// annotateDNSServers puts the DNS servers of the address's subnet on the
// IPAddress (see v1alpha1.DNSServersAnnotation), or takes away servers the
// pool no longer gives.
func annotateDNSServers(address *ipamv1.IPAddress, servers []string) {
	if len(servers) == 0 {
		delete(address.Annotations, v1alpha1.DNSServersAnnotation)
		return
	}
	if address.Annotations == nil {
		address.Annotations = map[string]string{}
	}
	address.Annotations[v1alpha1.DNSServersAnnotation] = strings.Join(servers, ",")
}

// errNotOurAddress: the IPAddress named after the claim is not the claim's.
var errNotOurAddress = errors.New("IPAddress is not the claim's")

// ownsAddress checks that an existing IPAddress was handed out to this
// claim (its owner reference carries the claim's UID) from this pool. One
// that was not is left by an earlier claim of the same name, which the
// cache has not yet seen go: adopting it would carry its address over,
// maybe from another pool. The reconcile fails and is retried until it is
// gone.
func (h *claimHandler) ownsAddress(address *ipamv1.IPAddress) error {
	uid, ok := records.ClaimUID(address)
	if !ok || uid != h.claim.UID || !poolref.AddressBelongsTo(address, h.pool) {
		return fmt.Errorf("%w: IPAddress %s was handed out to an earlier claim of this name or from another pool; waiting for it to go", errNotOurAddress, address.Name)
	}
	return nil
}

// claimID identifies the claim to the registry.
func (h *claimHandler) claimID() registry.Claim {
	return registry.Claim{NamespacedName: client.ObjectKeyFromObject(h.claim), UID: h.claim.UID}
}

// notReadyBecause says why the pool cannot serve claims: what its sources
// failed with, when they gave it nothing, else its spec's error.
func (h *claimHandler) notReadyBecause(err error) string {
	sources := conditions.Get(h.pool, v1alpha1.SourcesResolvedCondition)
	if sources != nil && sources.Status == metav1.ConditionFalse && len(h.pool.PoolStatus().Resolved) == 0 {
		return sources.Message
	}
	return err.Error()
}

// requestedUnavailable says why the claim cannot have the address it
// requested, or that the pool pins to its owner: the one rule of the pool
// that keeps the address out, or else the claim that holds it (err), which
// releasing serves the claim.
func (h *claimHandler) requestedUnavailable(requested netip.Addr, err error) {
	pinned, isPinned := poolspace.PreAllocationFor(h.pool.PoolSpec(), h.pool.GetNamespace(), h.owner())
	isPinned = isPinned && pinned.Address == requested
	why, ok := poolspace.WhyUnavailable(h.pool.PoolSpec(), h.pool.PoolStatus().Resolved, requested)
	switch {
	case !ok && isPinned:
		h.setNotReady(ipamv1.IPAddressClaimReadyAllocationFailedReason, "%s pins %s to the claim's owner, but %v; the claim is served once it is released",
			pinned.Field(), requested, err)
	case !ok:
		h.setNotReady(ipamv1.IPAddressClaimReadyAllocationFailedReason, "%v; the claim is served once it is released", err)
	case isPinned:
		h.setNotReady(ipamv1.IPAddressClaimReadyAllocationFailedReason,
			"%s pins %s to the claim's owner, but it %s in %s %q: pin an address the pool hands out",
			pinned.Field(), requested, why.Detail, poolref.KindOf(h.pool), h.pool.GetName())
	default:
		h.setNotReady(ipamv1.IPAddressClaimReadyAllocationFailedReason,
			"annotation %s: requested address %s %s in %s %q: request an address the pool hands out, or remove the annotation",
			v1alpha1.RequestedAddressAnnotation, requested, why.Detail, poolref.KindOf(h.pool), h.pool.GetName())
	}
}

// owner is who the claim is for, which spec.preAllocations match.
func (h *claimHandler) owner() poolspace.Owner {
	return poolspace.OwnerOf(h.claim.Namespace, h.claim.Annotations)
}

// applyPreAllocations applies the pool's spec.preAllocations to the
// address the claim requests (zero for none): a claim whose owner has an
// entry asks for its address, as a requested address does; a claim that
// requests an address pinned to another owner is refused.
func (h *claimHandler) applyPreAllocations(requested netip.Addr) (netip.Addr, error) {
	spec := h.pool.PoolSpec()
	if pinned, ok := poolspace.PreAllocationFor(spec, h.pool.GetNamespace(), h.owner()); ok {
		if requested.IsValid() && requested != pinned.Address {
			return netip.Addr{}, fmt.Errorf("annotation %s asks for %s, but %s pins %s to the claim's owner: remove the annotation",
				v1alpha1.RequestedAddressAnnotation, requested, pinned.Field(), pinned.Address)
		}
		return pinned.Address, nil
	}
	if pinned, ok := poolspace.PreAllocatedTo(spec, requested); ok && requested.IsValid() {
		return netip.Addr{}, fmt.Errorf("annotation %s: requested address %s is pre-allocated to %s (%s) in %s %q: request another address, or remove the annotation",
			v1alpha1.RequestedAddressAnnotation, requested, poolspace.DescribeOwner(spec, pinned.Index), pinned.Field(), poolref.KindOf(h.pool), h.pool.GetName())
	}
	return requested, nil
}

// requestedAddress reads the claim's requested-address annotation; a zero
// Addr means none.
func (h *claimHandler) requestedAddress() (netip.Addr, error) {
	value, ok := h.claim.Annotations[v1alpha1.RequestedAddressAnnotation]
	if !ok {
		return netip.Addr{}, nil
	}
	ip, err := netip.ParseAddr(value)
	if err != nil || ip.Zone() != "" || ip.Is4In6() {
		return netip.Addr{}, fmt.Errorf("annotation %s: %s is not a plain IP address", v1alpha1.RequestedAddressAnnotation, message.Quote(value))
	}
	return ip, nil
}

// releaseAddress deletes the claim's IPAddress itself and frees the address
// only once the API server confirms it is gone, so an address never has two
// IPAddresses at once. The reconciler then only drops the claim's finalizer.
//
// With a reuse grace period the claim, and so its IPAddress, stays until the
// period has passed since the claim's deletion: the hold lives in the API
// server and survives restarts.
func (h *claimHandler) releaseAddress(ctx context.Context) (*ctrl.Result, error) {
	key, ok := poolref.For(h.claim.Spec.PoolRef, h.claim.Namespace)
	if !ok {
		return nil, nil
	}
	if wait := h.remainingGracePeriod(); wait > 0 {
		ctrl.LoggerFrom(ctx).Info("Holding the address for the pool's reuse grace period", "remaining", wait.Round(time.Second))
		return &ctrl.Result{RequeueAfter: wait}, nil
	}

	gone, err := h.deleteAddress(ctx)
	if err != nil {
		return nil, err
	}
	if !gone {
		ctrl.LoggerFrom(ctx).Info("Waiting for the IPAddress to go before releasing its address", "IPAddress", h.claim.Name)
		return &ctrl.Result{RequeueAfter: releaseRetryDelay}, nil
	}
	gained, err := h.registry.Release(ctx, key, h.claimID())
	if err != nil {
		return nil, err
	}
	if slices.Contains(gained, key) {
		allocationsTotal.WithLabelValues(key.Kind, "released").Inc()
	}
	h.releases.releasedAll(ctx, key, gained)
	return nil, nil
}

// deleteAddress deletes the claim's IPAddress if it belongs to the claim's
// pool, and reports whether it no longer exists. It reads through the API
// server, not the cache, because a stale "not found" would free an address
// that still has an IPAddress.
func (h *claimHandler) deleteAddress(ctx context.Context) (bool, error) {
	address := &ipamv1.IPAddress{}
	err := h.reader.Get(ctx, client.ObjectKeyFromObject(h.claim), address)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading IPAddress %s: %w", h.claim.Name, err)
	case address.Spec.ClaimRef.Name != h.claim.Name:
		return true, nil // not this claim's: leave it alone
	}

	// The provider's finalizer stays while another holds the IPAddress: were
	// the claim gone meanwhile (its finalizer stripped), the IPAddress
	// reconciler frees the address once the IPAddress is gone, and it sees
	// only IPAddresses that still carry the finalizer.
	others := len(address.Finalizers) > 1 && controllerutil.ContainsFinalizer(address, ipamutil.ProtectAddressFinalizer)
	patch := client.MergeFrom(address.DeepCopy())
	if !others && controllerutil.RemoveFinalizer(address, ipamutil.ProtectAddressFinalizer) {
		if err := h.client.Patch(ctx, address, patch); err != nil {
			return false, client.IgnoreNotFound(err)
		}
	}
	if others && !address.DeletionTimestamp.IsZero() {
		return false, nil
	}
	err = h.client.Delete(ctx, address, client.Preconditions{UID: &address.UID})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("deleting IPAddress %s: %w", address.Name, err)
	}
	// Delete returns before removal only while other finalizers hold the object.
	return len(address.Finalizers) == 0, nil
}

// remainingGracePeriod is how much longer the claim's address must stay out
// of use. There is none when the pool is gone or going: nothing can reuse
// its addresses then.
func (h *claimHandler) remainingGracePeriod() time.Duration {
	if h.pool == nil || !h.pool.GetDeletionTimestamp().IsZero() || h.claim.DeletionTimestamp.IsZero() {
		return 0
	}
	seconds := ptr.Deref(h.pool.PoolSpec().AddressReuseGracePeriodSeconds, 0)
	if seconds == 0 {
		return 0
	}
	// The deletion timestamp is truncated to the second: count from the end
	// of that second, so the hold lasts at least the whole period.
	return time.Until(h.claim.DeletionTimestamp.Add(time.Duration(seconds+1) * time.Second))
}

func (h *claimHandler) setBound(address string) {
	conditions.Set(h.claim, metav1.Condition{
		Type:               ipamv1.IPAddressClaimReadyCondition,
		Status:             metav1.ConditionTrue,
		Reason:             claimBoundReason,
		Message:            fmt.Sprintf("Bound to %s", address),
		ObservedGeneration: h.claim.Generation,
	})
}

func (h *claimHandler) setNotReady(reason, format string, args ...any) {
	conditions.Set(h.claim, metav1.Condition{
		Type:               ipamv1.IPAddressClaimReadyCondition,
		Status:             metav1.ConditionFalse,
		Reason:             reason,
		Message:            message.Bound(fmt.Sprintf(format, args...)),
		ObservedGeneration: h.claim.Generation,
	})
}
