package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
)

// ClaimName is the name of the IPAddressClaim of spec.ports[port].networks[network]:
// predictable, so a restarted controller finds the claims it made, and
// showing which port and network the address is for.
func ClaimName(machine string, port, network int) string {
	return fmt.Sprintf("%s-port-%d-network-%d", machine, port, network)
}

// poolClaim is a network that takes its address from a pool.
type poolClaim struct {
	name string
	pool corev1.TypedLocalObjectReference
	// path is the field naming the pool, for messages.
	path string
}

func poolClaims(pm *infrav1.PacketMachine) []poolClaim {
	var claims []poolClaim
	for i, port := range pm.Spec.Ports {
		for j, network := range port.Networks {
			if network.AddressFromPool != nil {
				claims = append(claims, poolClaim{
					name: ClaimName(pm.Name, i, j),
					pool: *network.AddressFromPool,
					path: fmt.Sprintf("spec.ports[%d].networks[%d].addressFromPool", i, j),
				})
			}
		}
	}
	return claims
}

// claimAnswerTimeout is how long a claim of a kind the API server serves
// may go without any condition before the machine says that no IPAM
// provider seems to serve the kind: every provider following the contract
// sets the claim's Ready condition, bound or not, well within it.
const claimAnswerTimeout = 30 * time.Second

// waitingClaim is a claim that is not bound yet, and what the machine can
// tell about why.
type waitingClaim struct {
	poolClaim
	claim *ipamv1.IPAddressClaim
}

// describePool names a claim's pool for messages.
func describePool(pool corev1.TypedLocalObjectReference) string {
	return fmt.Sprintf("pool %s of kind %s (apiGroup %s)",
		message.Quote(pool.Name), message.Quote(pool.Kind), message.Quote(ptr.Deref(pool.APIGroup, "")))
}

// waitFacts are what the machine can tell of the claims that wait, and,
// while a claim may still get its first answer, when to look again.
func (r *PacketMachineReconciler) waitFacts(waiting []waitingClaim) ([]claimWait, time.Duration) {
	out := make([]claimWait, len(waiting))
	var requeue time.Duration
	for i, w := range waiting {
		f := claimWait{name: w.name, pool: w.pool, path: w.path, kindServed: true,
			age: time.Since(w.claim.CreationTimestamp.Time)}
		ready := conditions.Get(w.claim, ipamv1.IPAddressClaimReadyCondition)
		f.answered = ready != nil
		if ready != nil && ready.Status == metav1.ConditionFalse {
			f.refused, f.refusal = true, ready.Message
		} else {
			f.kindServed, f.suggestion = r.kindServed(w.pool)
		}
		if f.kindServed && !f.refused && !f.answered && f.age < claimAnswerTimeout {
			if wait := claimAnswerTimeout - f.age; requeue == 0 || wait < requeue {
				requeue = wait
			}
		}
		out[i] = f
	}
	return out, requeue
}

// kindServed reports whether the API server serves the pool's kind, and
// when it does not but serves one of its group under another spelling (a
// wrong case, the plural), a suggestion naming it.
func (r *PacketMachineReconciler) kindServed(pool corev1.TypedLocalObjectReference) (bool, string) {
	group := ptr.Deref(pool.APIGroup, "")
	mapper := r.Client.RESTMapper()
	mapping, err := mapper.RESTMapping(schema.GroupKind{Group: group, Kind: pool.Kind})
	switch {
	case meta.IsNoMatchError(err):
		gvk, err := mapper.KindFor(schema.GroupVersionResource{Group: group, Resource: strings.ToLower(pool.Kind)})
		switch {
		case err != nil:
			return false, ""
		case gvk.Kind == pool.Kind:
			return true, ""
		}
		return false, fmt.Sprintf(" (did you mean kind %s?)", gvk.Kind)
	case err != nil:
		// Discovery failed: the claim's own silence will tell.
		return true, ""
	}
	// The mapper matches kinds whatever their case; providers match them
	// exactly, as the API server does.
	gvk, err := mapper.KindFor(mapping.Resource)
	if err == nil && gvk.Kind != pool.Kind {
		return false, fmt.Sprintf(" (did you mean kind %s?)", gvk.Kind)
	}
	return true, ""
}

// reconcileIPAddresses makes sure every network with addressFromPool has its
// claim and is done once every claim is bound to a valid address, recorded
// in status. Until then it returns not done without an error: the watch on
// the claims brings the machine back when one gets bound.
func (r *PacketMachineReconciler) reconcileIPAddresses(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	log := ctrl.LoggerFrom(ctx)
	pm := s.PacketMachine
	claims := poolClaims(pm)

	if len(claims) > 0 && !r.ipamInstalled {
		s.facts.claims = ipamMissing{}
		log.Info("Cannot claim addresses: " + ipamNotInstalledMessage)
		return ctrl.Result{}, false, nil
	}

	got, err := r.readClaims(ctx, s, claims)
	if meta.IsNoMatchError(err) {
		s.facts.claims = ipamMissing{}
		log.Error(err, "Cannot claim addresses: "+ipamNotInstalledMessage)
		return ctrl.Result{}, false, nil
	}
	if err != nil {
		return ctrl.Result{}, false, err
	}
	count := claimCount{bound: len(got.bound), total: len(claims)}
	if len(got.deleting) > 0 {
		r.ipAddressInvalid(s, claimsDeleting{claimCount: count, names: got.deleting})
		return ctrl.Result{}, false, nil
	}
	if len(got.waiting) > 0 {
		waits, requeue := r.waitFacts(got.waiting)
		s.facts.claims = claimsWaiting{claimCount: count, created: got.created, claims: waits}
		return ctrl.Result{RequeueAfter: requeue}, false, nil
	}

	networks, err := machineNetworks(pm, got.bound)
	if err != nil {
		r.ipAddressInvalid(s, addressesUnusable{claimCount: count, err: err})
		return ctrl.Result{}, false, nil
	}
	s.facts.claims = claimsBound{claimCount: count, networks: networks}
	s.Networks = networks.render
	return ctrl.Result{}, true, nil
}

// claimsRead is what the machine's claims show: the IPAddresses of the
// bound ones by network, those that wait, those being deleted, and whether
// one was created just now.
type claimsRead struct {
	bound    map[string]*ipamv1.IPAddress
	waiting  []waitingClaim
	deleting []string
	created  bool
}

// readClaims makes sure each claim exists and reads where it stands.
func (r *PacketMachineReconciler) readClaims(ctx context.Context, s *machineScope, claims []poolClaim) (claimsRead, error) {
	got := claimsRead{bound: make(map[string]*ipamv1.IPAddress, len(claims))}
	for _, c := range claims {
		claim, isNew, err := r.ensureClaim(ctx, s, c)
		if err != nil {
			return got, err
		}
		got.created = got.created || isNew
		if !claim.DeletionTimestamp.IsZero() {
			// The protection finalizer keeps the claim, but IPAM providers
			// that follow ipamutil's claim lifecycle release the address as
			// soon as the claim is being deleted: the machine can no longer
			// count on it.
			got.deleting = append(got.deleting, claim.Name)
			continue
		}
		if claim.Status.AddressRef.Name == "" {
			got.waiting = append(got.waiting, waitingClaim{poolClaim: c, claim: claim})
			continue
		}
		address := &ipamv1.IPAddress{}
		key := client.ObjectKey{Namespace: s.PacketMachine.Namespace, Name: claim.Status.AddressRef.Name}
		if err := r.Client.Get(ctx, key, address); err != nil {
			if apierrors.IsNotFound(err) {
				// The cache has not seen the address yet; its creation is
				// followed by the claim's update, which wakes us again.
				got.waiting = append(got.waiting, waitingClaim{poolClaim: c, claim: claim})
				continue
			}
			return got, err
		}
		got.bound[c.name] = address
	}

	return got, nil
}

// ipAddressInvalid records addresses the machine cannot use, with an event
// when the condition turns so. Only a change of the claims or addresses
// (which the watch sees) or of the machine can fix it: nothing to retry.
func (r *PacketMachineReconciler) ipAddressInvalid(s *machineScope, f claimsFact) {
	s.facts.claims = f
	warnOnChange(r.Recorder, s.PacketMachine, ipAddressClaimed(f), "ValidateIPAddresses")
}

const ipamNotInstalledMessage = "the IPAddressClaim API (ipam.cluster.x-k8s.io) is not installed in this cluster: " +
	"install Cluster API's IPAM CRDs and restart the provider"

// ensureClaim returns the claim c, creating it if it does not exist.
func (r *PacketMachineReconciler) ensureClaim(ctx context.Context, s *machineScope, c poolClaim) (_ *ipamv1.IPAddressClaim, created bool, _ error) {
	pm := s.PacketMachine
	claim := &ipamv1.IPAddressClaim{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: pm.Namespace, Name: c.name}, claim)
	if err == nil {
		if !metav1.IsControlledBy(claim, pm) {
			return nil, false, fmt.Errorf("IPAddressClaim %s exists but is not controlled by PacketMachine %s", c.name, pm.Name)
		}
		return claim, false, keepShardLabel(ctx, r.Client, claim, pm)
	}
	if !apierrors.IsNotFound(err) {
		return nil, false, err
	}

	claim = &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   pm.Namespace,
			Name:        c.name,
			Labels:      createdLabels(pm, s.Cluster.Name),
			Annotations: claimOwnerAnnotations(s),
			Finalizers:  []string{infrav1.IPClaimProtectionFinalizer},
		},
		Spec: ipamv1.IPAddressClaimSpec{
			ClusterName: s.Cluster.Name,
			PoolRef: ipamv1.IPPoolReference{
				APIGroup: ptr.Deref(c.pool.APIGroup, ""),
				Kind:     c.pool.Kind,
				Name:     c.pool.Name,
			},
		},
	}
	if err := controllerutil.SetControllerReference(pm, claim, r.Client.Scheme()); err != nil {
		return nil, false, err
	}
	if err := r.Client.Create(ctx, claim); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Made by an earlier reconcile the cache has not caught up with.
			return claim, false, nil
		}
		return nil, false, fmt.Errorf("creating IPAddressClaim %s: %w", c.name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Created IPAddressClaim", "IPAddressClaim", c.name, "pool", c.pool.Kind+"/"+c.pool.Name)
	r.Recorder.Eventf(pm, nil, corev1.EventTypeNormal, "IPAddressClaimCreated", "ClaimIPAddress", "Created IPAddressClaim %s on %s %s", c.name, c.pool.Kind, c.pool.Name)
	return claim, true, nil
}

// claimOwnerAnnotations say who a claim is for: the Machine, and the
// hardware reservation its device will run on when the spec names exactly
// one. A pool can pin an address to either (a MetalVRFIPPool's
// spec.preAllocations), so a machine that replaces another on the same
// reserved server, or a named control-plane Machine, gets the same address.
func claimOwnerAnnotations(s *machineScope) map[string]string {
	annotations := map[string]string{infrav1.ClaimMachineAnnotation: s.Machine.Name}
	if id := s.PacketMachine.Spec.HardwareReservationID; id != "" && id != "next-available" && !strings.Contains(id, ",") {
		annotations[infrav1.ClaimHardwareReservationAnnotation] = id
	}
	return annotations
}

// releaseIPAddresses lets go of the machine's claims: it drops the
// protection finalizer and deletes each claim, and reports done once none
// is left, so the machine is not gone before its addresses are released.
func (r *PacketMachineReconciler) releaseIPAddresses(ctx context.Context, s *machineScope) (ctrl.Result, bool, error) {
	pm := s.PacketMachine
	if !r.ipamInstalled {
		return ctrl.Result{}, true, nil
	}
	remaining := 0
	for _, c := range poolClaims(pm) {
		claim := &ipamv1.IPAddressClaim{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: pm.Namespace, Name: c.name}, claim); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return ctrl.Result{}, false, err
		}
		if !metav1.IsControlledBy(claim, pm) {
			continue
		}
		remaining++
		deleted, err := releaseClaim(ctx, r.Client, claim, infrav1.IPClaimProtectionFinalizer)
		if err != nil {
			return ctrl.Result{}, false, err
		}
		if deleted {
			r.Recorder.Eventf(pm, nil, corev1.EventTypeNormal, "IPAddressClaimReleased", "ReleaseIPAddress", "Released IPAddressClaim %s", claim.Name)
		}
	}
	if remaining > 0 {
		ctrl.LoggerFrom(ctx).Info("Waiting for the IPAddressClaims to be released", "remaining", remaining)
		s.facts.deletion = claimsReleasing{remaining: remaining}
	}
	return ctrl.Result{}, remaining == 0, nil
}
