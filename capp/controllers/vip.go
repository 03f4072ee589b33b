package controllers

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
)

// VIPClaimName is the name of the IPAddressClaim of a PacketCluster's
// spec.vip: predictable, so a restarted controller finds the claim it made.
func VIPClaimName(cluster string) string { return cluster + "-control-plane-vip" }

// reconcileVIP makes the claim of spec.vip and, once it is bound to a
// valid address, makes that address the endpoint and status.vip. Until
// then it is not done without an error: the watch on the claim brings the
// PacketCluster back when it gets bound.
func (r *PacketClusterReconciler) reconcileVIP(ctx context.Context, s *clusterScope) (ctrl.Result, bool, error) {
	pc := s.PacketCluster
	if !r.ipamInstalled {
		s.facts.endpoint = ipamMissing{}
		return ctrl.Result{}, false, nil
	}
	claim, err := r.ensureVIPClaim(ctx, s)
	if meta.IsNoMatchError(err) {
		s.facts.endpoint = ipamMissing{}
		return ctrl.Result{}, false, nil
	}
	if err != nil {
		return ctrl.Result{}, false, err
	}
	pool := pc.Spec.VIP.AddressFromPool
	if !claim.DeletionTimestamp.IsZero() {
		// As for a machine's claims: the IPAM provider may release the
		// address as soon as the claim is being deleted.
		r.vipInvalid(s, vipClaimDeleting{claim: claim.Name})
		return ctrl.Result{}, false, nil
	}
	waiting := vipWaiting{claim: claim.Name, kind: pool.Kind, pool: pool.Name}
	if claim.Status.AddressRef.Name == "" {
		s.facts.endpoint = waiting
		return ctrl.Result{}, false, nil
	}
	address := &ipamv1.IPAddress{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: pc.Namespace, Name: claim.Status.AddressRef.Name}, address); err != nil {
		if apierrors.IsNotFound(err) {
			// The cache has not seen the address yet; the claim's update
			// that follows its creation wakes us again.
			s.facts.endpoint = waiting
			return ctrl.Result{}, false, nil
		}
		return ctrl.Result{}, false, err
	}
	vip, err := netip.ParseAddr(address.Spec.Address)
	if err != nil || vip.Zone() != "" {
		r.vipInvalid(s, vipNotAnAddress{address: address.Name, claim: claim.Name, value: address.Spec.Address})
		return ctrl.Result{}, false, nil
	}
	ep := &pc.Spec.ControlPlaneEndpoint
	if ep.Host != "" && ep.Host != vip.String() {
		// The Cluster copies the endpoint once and keeps it: the nodes
		// would announce an address nobody connects to.
		r.vipInvalid(s, vipEndpointMismatch{host: ep.Host, vip: vip.String(), claim: claim.Name})
		return ctrl.Result{}, false, nil
	}
	ep.Host = vip.String()
	ep.Port = cmp.Or(ep.Port, defaultAPIServerPort)
	s.facts.endpoint = vipClaimed{endpoint: hostPort(ep.Host, ep.Port), vip: vip.String(), claim: claim.Name, kind: pool.Kind, pool: pool.Name}
	return ctrl.Result{}, true, nil
}

// vipInvalid records a VIP the cluster cannot use, with an event when the
// condition turns so. Only a change of the claim or its address (which the
// watch sees) can fix it: nothing to retry.
func (r *PacketClusterReconciler) vipInvalid(s *clusterScope, f clusterEndpointFact) {
	s.facts.endpoint = f
	warnOnChange(r.Recorder, s.PacketCluster, controlPlaneEndpointReady(f), "ClaimVIP")
}

// ensureVIPClaim returns the claim of spec.vip, creating it if it does not
// exist. The protection finalizer keeps the address until the
// PacketCluster releases it on deletion, whatever deletes the claim.
func (r *PacketClusterReconciler) ensureVIPClaim(ctx context.Context, s *clusterScope) (*ipamv1.IPAddressClaim, error) {
	pc := s.PacketCluster
	name := VIPClaimName(pc.Name)
	claim := &ipamv1.IPAddressClaim{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: pc.Namespace, Name: name}, claim)
	if err == nil {
		if !metav1.IsControlledBy(claim, pc) {
			return nil, fmt.Errorf("IPAddressClaim %s exists but is not controlled by PacketCluster %s", name, pc.Name)
		}
		return claim, keepShardLabel(ctx, r.Client, claim, pc)
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	pool := pc.Spec.VIP.AddressFromPool
	claim = &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:  pc.Namespace,
			Name:       name,
			Labels:     createdLabels(pc, s.Cluster.Name),
			Finalizers: []string{infrav1.VIPClaimProtectionFinalizer},
		},
		Spec: ipamv1.IPAddressClaimSpec{
			ClusterName: s.Cluster.Name,
			PoolRef:     ipamv1.IPPoolReference{APIGroup: ptr.Deref(pool.APIGroup, ""), Kind: pool.Kind, Name: pool.Name},
		},
	}
	if err := controllerutil.SetControllerReference(pc, claim, r.Client.Scheme()); err != nil {
		return nil, err
	}
	if err := r.Client.Create(ctx, claim); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Made by an earlier reconcile the cache has not caught up with.
			return claim, nil
		}
		return nil, fmt.Errorf("creating IPAddressClaim %s: %w", name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Created the VIP's IPAddressClaim", "IPAddressClaim", name, "pool", pool.Kind+"/"+pool.Name)
	r.Recorder.Eventf(pc, nil, corev1.EventTypeNormal, "VIPClaimCreated", "ClaimVIP", "Created IPAddressClaim %s on %s %s", name, pool.Kind, pool.Name)
	return claim, nil
}

// releaseVIP lets go of the claim of spec.vip: it drops the protection
// finalizer and deletes the claim, and is done once the claim is gone. It
// runs on the PacketCluster's deletion, which CAPI starts once the
// cluster's machines, the nodes announcing the VIP, are gone.
func (r *PacketClusterReconciler) releaseVIP(ctx context.Context, s *clusterScope) (ctrl.Result, bool, error) {
	pc := s.PacketCluster
	if pc.Spec.VIP == nil || !r.ipamInstalled {
		return ctrl.Result{}, true, nil
	}
	claim := &ipamv1.IPAddressClaim{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: pc.Namespace, Name: VIPClaimName(pc.Name)}, claim); err != nil {
		return ctrl.Result{}, apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(claim, pc) {
		return ctrl.Result{}, true, nil
	}
	deleted, err := releaseClaim(ctx, r.Client, claim, infrav1.VIPClaimProtectionFinalizer)
	if err != nil {
		return ctrl.Result{}, false, err
	}
	if deleted {
		r.Recorder.Eventf(pc, nil, corev1.EventTypeNormal, "VIPClaimReleased", "ReleaseVIP", "Released IPAddressClaim %s", claim.Name)
	}
	// The claim's deletion, once its IPAM provider has let the address go,
	// wakes the PacketCluster through the watch.
	s.facts.deletion = vipClaimGoing{claim: claim.Name}
	return ctrl.Result{}, false, nil
}
