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

// releaseRetryDelay is how long to wait for an IPAddress held by a foreign
// finalizer before checking again whether it is gone.
const releaseRetryDelay = 5 * time.Second

// claimScope is one reconcile of a claim: the claim, its pool once read,
// and what the reconcile observed of where the claim stands.
type claimScope struct {
	claim *ipamv1.IPAddressClaim
	pool  v1alpha1.Pool
	// ready is the fact the Ready condition is derived from (claimReady);
	// nil leaves the condition as it is.
	ready fact
}

// poolID names the claim's pool, once read, in its facts.
func (s *claimScope) poolID() poolID {
	return poolID{poolref.KindOf(s.pool), s.pool.GetName()}
}

// fetchPool reads the claim's pool from the cache.
func (r *claimReconciler) fetchPool(ctx context.Context, s *claimScope) (v1alpha1.Pool, error) {
	key, ok := poolref.For(s.claim.Spec.PoolRef, s.claim.Namespace)
	if !ok {
		return nil, reconcile.TerminalError(fmt.Errorf("claim names pool kind %q, which this provider does not serve", s.claim.Spec.PoolRef.Kind))
	}
	pool, _ := poolref.New(key.Kind)
	if err := r.client.Get(ctx, key.ObjectKey(), pool); err != nil {
		if apierrors.IsNotFound(err) && s.claim.DeletionTimestamp.IsZero() {
			// The pool watch picks the claim up again when the pool appears.
			s.ready = poolMissing{poolID{key.Kind, key.Name}}
		}
		return nil, err
	}
	pool.GetObjectKind().SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(key.Kind))
	s.pool = pool
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
// released or the pool changes (see claimReconciler.setupWithManager).
func (r *claimReconciler) allocate(ctx context.Context, s *claimScope, address *ipamv1.IPAddress) error {
	pool := s.poolID()
	if !s.pool.GetDeletionTimestamp().IsZero() {
		s.ready = poolDeleting{pool}
		return reconcile.TerminalError(fmt.Errorf("%s is being deleted", pool))
	}

	requested, err := s.requestedAddress()
	if err == nil {
		requested, err = s.applyPreAllocations(requested)
	}
	if err != nil {
		s.ready = allocationFailed{err}
		return reconcile.TerminalError(err)
	}
	ip, subnet, err := r.registry.Acquire(ctx, s.pool, s.claimID(), requested)
	switch {
	case errors.Is(err, cidr.ErrExhausted):
		s.ready = poolExhausted{pool}
		r.recorder.Eventf(s.claim, nil, corev1.EventTypeWarning, ipamv1.IPAddressClaimReadyPoolExhaustedReason, "Allocate", "%s has no free address", pool)
		allocationsTotal.WithLabelValues(pool.kind, "exhausted").Inc()
		return reconcile.TerminalError(err)
	case errors.Is(err, registry.ErrFenced):
		// Not the claim's problem: this process may not allocate now.
		return err
	case errors.Is(err, registry.ErrRequestedUnavailable):
		s.ready = s.requestedUnavailable(requested, err)
		return reconcile.TerminalError(err)
	case errors.Is(err, registry.ErrPoolNotReady):
		s.ready = poolCannotServe{pool, s.notReadyBecause(err)}
		return reconcile.TerminalError(err)
	case err != nil:
		s.ready = allocationFailed{err}
		allocationsTotal.WithLabelValues(pool.kind, "failed").Inc()
		return err
	}

	address.Spec.Address = ip.String()
	address.Spec.Prefix = ptr.To(int32(subnet.Prefix.Bits()))
	if subnet.Gateway.IsValid() {
		address.Spec.Gateway = subnet.Gateway.String()
	}
	annotateDNSServers(address, poolspace.DNSServers(s.pool.PoolSpec(), ip))
	allocationsTotal.WithLabelValues(pool.kind, "allocated").Inc()
	s.ready = addressBound{address.Spec.Address}
	return nil
}

// adoptAddress binds the claim to the IPAddress it already has, recording
// its address if this process did not hand it out (moved, restored,
// another replica's).
func (r *claimReconciler) adoptAddress(ctx context.Context, s *claimScope, address *ipamv1.IPAddress) error {
	if err := s.ownsAddress(address); err != nil {
		s.ready = allocationFailed{err}
		return err
	}
	ip, err := netip.ParseAddr(address.Spec.Address)
	if err == nil && s.claim.Status.AddressRef.Name == "" {
		// Not bound yet (moved, restored, or written past the webhook):
		// the pins hold as on allocation. A bound claim keeps its address
		// when a pin is added later.
		err = poolspace.PinnedElsewhere(s.pool.PoolSpec(), s.poolID().String(), s.pool.GetNamespace(), ip, s.owner())
	}
	if err == nil {
		err = r.registry.Adopt(ctx, s.pool, s.claimID(), ip)
	}
	switch {
	case errors.Is(err, registry.ErrFenced):
		// Not the claim's problem: this process may not allocate now.
		return err
	case err != nil:
		s.ready = adoptionRefused{address.Name, err}
		return reconcile.TerminalError(err)
	}
	annotateDNSServers(address, poolspace.DNSServers(s.pool.PoolSpec(), ip))
	if s.claim.Status.AddressRef.Name == "" {
		// Bound to an IPAddress it did not get here (moved or restored):
		// no IPAddress event tells the pool its count grew.
		r.releases.counted(ctx, poolref.KeyOf(s.pool))
	}
	s.ready = addressBound{address.Spec.Address}
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
func (s *claimScope) ownsAddress(address *ipamv1.IPAddress) error {
	uid, ok := records.ClaimUID(address)
	if !ok || uid != s.claim.UID || !poolref.AddressBelongsTo(address, s.pool) {
		return fmt.Errorf("%w: IPAddress %s was handed out to an earlier claim of this name or from another pool; waiting for it to go", errNotOurAddress, address.Name)
	}
	return nil
}

// claimID identifies the claim to the registry.
func (s *claimScope) claimID() registry.Claim {
	return registry.Claim{NamespacedName: client.ObjectKeyFromObject(s.claim), UID: s.claim.UID}
}

// notReadyBecause says why the pool cannot serve claims: what its sources
// failed with, when they gave it nothing, else its spec's error.
func (s *claimScope) notReadyBecause(err error) string {
	sources := conditions.Get(s.pool, v1alpha1.SourcesResolvedCondition)
	if sources != nil && sources.Status == metav1.ConditionFalse && len(s.pool.PoolStatus().Resolved) == 0 {
		return sources.Message
	}
	return err.Error()
}

// requestedUnavailable is what keeps the address the claim requested, or
// that the pool pins to its owner, from it: a rule of the pool, or else the
// claim that holds it (held).
func (s *claimScope) requestedUnavailable(requested netip.Addr, held error) requestedUnavailable {
	f := requestedUnavailable{pool: s.poolID(), address: requested, held: held}
	if pinned, ok := poolspace.PreAllocationFor(s.pool.PoolSpec(), s.pool.GetNamespace(), s.owner()); ok && pinned.Address == requested {
		f.pinnedBy = pinned.Field()
	}
	if why, ok := poolspace.WhyUnavailable(s.pool.PoolSpec(), s.pool.PoolStatus().Resolved, requested); ok {
		f.ruledOut = why.Detail
	}
	return f
}

// owner is who the claim is for, which spec.preAllocations match.
func (s *claimScope) owner() poolspace.Owner {
	return poolspace.OwnerOf(s.claim.Namespace, s.claim.Annotations)
}

// applyPreAllocations applies the pool's spec.preAllocations to the
// address the claim requests (zero for none): a claim whose owner has an
// entry asks for its address, as a requested address does; a claim that
// requests an address pinned to another owner is refused.
func (s *claimScope) applyPreAllocations(requested netip.Addr) (netip.Addr, error) {
	spec := s.pool.PoolSpec()
	if pinned, ok := poolspace.PreAllocationFor(spec, s.pool.GetNamespace(), s.owner()); ok {
		if requested.IsValid() && requested != pinned.Address {
			return netip.Addr{}, fmt.Errorf("annotation %s asks for %s, but %s pins %s to the claim's owner: remove the annotation",
				v1alpha1.RequestedAddressAnnotation, requested, pinned.Field(), pinned.Address)
		}
		return pinned.Address, nil
	}
	if pinned, ok := poolspace.PreAllocatedTo(spec, requested); ok && requested.IsValid() {
		return netip.Addr{}, fmt.Errorf("annotation %s: requested address %s is pre-allocated to %s (%s) in %s: request another address, or remove the annotation",
			v1alpha1.RequestedAddressAnnotation, requested, poolspace.DescribeOwner(spec, pinned.Index), pinned.Field(), s.poolID())
	}
	return requested, nil
}

// requestedAddress reads the claim's requested-address annotation; a zero
// Addr means none.
func (s *claimScope) requestedAddress() (netip.Addr, error) {
	value, ok := s.claim.Annotations[v1alpha1.RequestedAddressAnnotation]
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
// With a reuse grace period a deleting claim, and so its IPAddress, stays
// until the period has passed since the claim's deletion: the hold lives in
// the API server and survives restarts. (A claim that is gone at once, as
// one without other finalizers is, leaves its IPAddress to the address
// reconciler, which holds that instead.)
func (r *claimReconciler) releaseAddress(ctx context.Context, s *claimScope) (*ctrl.Result, error) {
	key, ok := poolref.For(s.claim.Spec.PoolRef, s.claim.Namespace)
	if !ok {
		return nil, nil
	}
	if wait := s.remainingGracePeriod(); wait > 0 {
		ctrl.LoggerFrom(ctx).Info("Holding the address for the pool's reuse grace period", "remaining", wait.Round(time.Second))
		return &ctrl.Result{RequeueAfter: wait}, nil
	}

	gone, err := r.deleteAddress(ctx, s.claim)
	if err != nil {
		return nil, err
	}
	if !gone {
		ctrl.LoggerFrom(ctx).Info("Waiting for the IPAddress to go before releasing its address", "IPAddress", s.claim.Name)
		return &ctrl.Result{RequeueAfter: releaseRetryDelay}, nil
	}
	gained, err := r.registry.Release(ctx, key, s.claimID())
	if err != nil {
		return nil, err
	}
	if slices.Contains(gained, key) {
		allocationsTotal.WithLabelValues(key.Kind, "released").Inc()
	}
	r.releases.releasedAll(ctx, key, gained)
	return nil, nil
}

// deleteAddress deletes the claim's IPAddress if it belongs to the claim's
// pool, and reports whether it no longer exists. It reads through the API
// server, not the cache, because a stale "not found" would free an address
// that still has an IPAddress.
func (r *claimReconciler) deleteAddress(ctx context.Context, claim *ipamv1.IPAddressClaim) (bool, error) {
	address := &ipamv1.IPAddress{}
	err := r.reader.Get(ctx, client.ObjectKeyFromObject(claim), address)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading IPAddress %s: %w", claim.Name, err)
	case address.Spec.ClaimRef.Name != claim.Name:
		return true, nil // not this claim's: leave it alone
	}

	// The provider's finalizer stays while another holds the IPAddress: were
	// the claim gone meanwhile (its finalizer stripped), the IPAddress
	// reconciler frees the address once the IPAddress is gone, and it sees
	// only IPAddresses that still carry the finalizer.
	others := len(address.Finalizers) > 1 && controllerutil.ContainsFinalizer(address, ipamutil.ProtectAddressFinalizer)
	patch := client.MergeFrom(address.DeepCopy())
	if !others && controllerutil.RemoveFinalizer(address, ipamutil.ProtectAddressFinalizer) {
		if err := r.client.Patch(ctx, address, patch); err != nil {
			return false, client.IgnoreNotFound(err)
		}
	}
	if others && !address.DeletionTimestamp.IsZero() {
		return false, nil
	}
	err = r.client.Delete(ctx, address, client.Preconditions{UID: &address.UID})
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
// of use.
func (s *claimScope) remainingGracePeriod() time.Duration {
	if s.pool == nil {
		return 0
	}
	return reuseHold(s.pool, s.claim.DeletionTimestamp)
}

// reuseHold is how much longer an address released at deleted (the
// deletion of its claim, or of its IPAddress once the claim was gone) stays
// out of use under the pool's reuse grace period. There is none when the
// pool is going: nothing can reuse its addresses then.
func reuseHold(pool v1alpha1.Pool, deleted *metav1.Time) time.Duration {
	if deleted.IsZero() || !pool.GetDeletionTimestamp().IsZero() {
		return 0
	}
	seconds := ptr.Deref(pool.PoolSpec().AddressReuseGracePeriodSeconds, 0)
	if seconds == 0 {
		return 0
	}
	// Deletion timestamps are truncated to the second: count from the end
	// of that second, so the hold lasts at least the whole period.
	return time.Until(deleted.Add(time.Duration(seconds+1) * time.Second))
}
