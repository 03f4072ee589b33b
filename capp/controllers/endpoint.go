package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// defaultAPIServerPort is the endpoint's port when the spec names none.
const defaultAPIServerPort = 6443

// EndpointTagPrefix + the PacketCluster's UID identifies the reservation of
// its endpoint: a restarted manager finds it by this tag instead of
// reserving another.
const EndpointTagPrefix = device.EndpointTagPrefix

// endpointPlan is where a PacketCluster's endpoint comes from, decided from
// its spec and annotations alone: reserve, the VIP of spec.vip, or else
// the condition to report.
type endpointPlan struct {
	reserve bool
	vip     bool
	status  bool
	reason  string
	message string
}

// planEndpoint decides where the endpoint comes from. Once a reservation
// may exist (the annotation is set) the cluster stays on it, whatever the
// spec says since; then KUBE_VIP with spec.vip claims the VIP (which fills
// the host); otherwise a host set by the user wins, and only CPEM reserves
// one.
func planEndpoint(pc *infrav1.PacketCluster) endpointPlan {
	ep := pc.Spec.ControlPlaneEndpoint
	if _, managed := pc.Annotations[infrav1.EndpointReservationAnnotation]; managed {
		return endpointPlan{reserve: true}
	}
	if pc.Spec.VIP != nil && pc.Spec.VIPManager == infrav1.VIPManagerKubeVIP {
		return endpointPlan{vip: true}
	}
	if ep.Host != "" {
		return endpointPlan{status: true, reason: infrav1.ControlPlaneEndpointSetByUserReason, message: fmt.Sprintf(
			"spec.controlPlaneEndpoint %s is set by the user", hostPort(ep.Host, cmp.Or(ep.Port, defaultAPIServerPort)))}
	}
	switch pc.Spec.VIPManager {
	case infrav1.VIPManagerKubeVIP:
		return endpointPlan{reason: infrav1.ControlPlaneEndpointRequiredReason, message: "vipManager KUBE_VIP does not reserve an address: " +
			"set spec.vip to claim one from an IPAM pool, or spec.controlPlaneEndpoint.host to the address kube-vip announces"}
	case infrav1.VIPManagerEMLB:
		return endpointPlan{reason: infrav1.ControlPlaneEndpointRequiredReason, message: "vipManager EMLB: the Equinix Metal Load Balancer " +
			"is gone with the platform; set spec.controlPlaneEndpoint.host, or use vipManager CPEM"}
	}
	if pc.Spec.Metro == "" {
		return endpointPlan{reason: infrav1.MetroRequiredReason, message: "vipManager CPEM reserves a public IPv4 address in spec.metro, " +
			"which is empty: set spec.metro, or spec.controlPlaneEndpoint.host"}
	}
	return endpointPlan{reserve: true}
}

// reconcileEndpoint sets spec.controlPlaneEndpoint: the user's, the VIP
// claimed for spec.vip, or a public IPv4 address reserved in the cluster's
// metro. The reservation is
// adopted by tag when one exists (a reserve whose answer was lost, a
// restart), so the cluster never holds two. Done once the endpoint is set.
func (r *PacketClusterReconciler) reconcileEndpoint(ctx context.Context, s *clusterScope) (ctrl.Result, bool, error) {
	pc := s.PacketCluster
	const cond = infrav1.ControlPlaneEndpointReadyCondition
	plan := planEndpoint(pc)
	if plan.vip {
		return r.reconcileVIP(ctx, s)
	}
	if wait := r.backoff.waiting(pc.UID); plan.reserve && wait > 0 {
		// The last Metal call failed: its condition stands until the retry.
		return ctrl.Result{RequeueAfter: wait}, false, nil
	}
	if !plan.reserve {
		if !plan.status {
			s.observeFalse(cond, plan.reason, plan.message)
			return ctrl.Result{}, false, nil
		}
		if pc.Spec.ControlPlaneEndpoint.Port == 0 {
			pc.Spec.ControlPlaneEndpoint.Port = defaultAPIServerPort
		}
		s.observeTrue(cond, plan.reason, plan.message)
		pc.Status.Initialization.Provisioned = ptr.To(true)
		return ctrl.Result{}, true, nil
	}

	c, err := r.metal(ctx, s)
	if err != nil {
		if serr, ok := errors.AsType[*setupError](err); ok {
			s.observeFalse(cond, serr.reason, serr.message)
			return ctrl.Result{RequeueAfter: noCredentials}, false, nil
		}
		return ctrl.Result{}, false, err
	}
	id := pc.Annotations[infrav1.EndpointReservationAnnotation]
	if id != "" && id != infrav1.EndpointReservationPending {
		return r.recordedReservation(ctx, s, c, id)
	}
	return r.newReservation(ctx, s, c)
}

// recordedReservation uses the reservation the annotation names, once it is
// proven the cluster's.
func (r *PacketClusterReconciler) recordedReservation(ctx context.Context, s *clusterScope, c *metal.Client, id string) (ctrl.Result, bool, error) {
	pc := s.PacketCluster
	const cond = infrav1.ControlPlaneEndpointReadyCondition
	res, err := c.GetIPReservation(ctx, id)
	switch {
	case metal.IsNotFound(err):
		s.observeFalse(cond, infrav1.EndpointReservationNotFoundReason, fmt.Sprintf(
			"reservation %s of spec.controlPlaneEndpoint %s is gone from the platform: the address cannot be had back",
			id, pc.Spec.ControlPlaneEndpoint.Host))
		return ctrl.Result{RequeueAfter: slowPoll}, false, nil
	case err != nil:
		return r.endpointFailed(ctx, s, "reading reservation "+id, err)
	}
	if err := reservationOwned(ctx, r.Client, pc, res); err != nil {
		s.observeFalse(cond, infrav1.EndpointReservationNotOwnedReason, fmt.Sprintf(
			"metadata.annotations[%s] %q: %v; the provider neither uses nor releases it", infrav1.EndpointReservationAnnotation, id, err))
		return ctrl.Result{RequeueAfter: slowPoll}, false, nil
	}
	return r.useReservation(s, res)
}

// newReservation adopts the reservation carrying the cluster's tag (a
// reserve whose answer was lost, a restart), or reserves one.
func (r *PacketClusterReconciler) newReservation(ctx context.Context, s *clusterScope, c *metal.Client) (ctrl.Result, bool, error) {
	pc := s.PacketCluster
	const cond = infrav1.ControlPlaneEndpointReadyCondition
	tagged, err := c.ListPublicIPv4Reservations(ctx, endpointTag(pc))
	if err != nil {
		return r.endpointFailed(ctx, s, "listing the project's public IPv4 reservations", err)
	}
	if len(tagged) > 0 {
		keep, extra := pickReservation(tagged, pc.Spec.ControlPlaneEndpoint.Host)
		for _, res := range extra {
			err := c.DeleteIPReservation(ctx, res.GetId())
			countEndpointStep("release", err)
			if err != nil {
				return r.endpointFailed(ctx, s, "releasing the surplus reservation "+res.GetId(), err)
			}
			r.Recorder.Eventf(pc, nil, corev1.EventTypeNormal, "EndpointReservationReleased", "ReserveEndpoint",
				"Released surplus reservation %s (%s) carrying this cluster's tag", res.GetId(), res.GetAddress())
		}
		ctrl.LoggerFrom(ctx).Info("Adopted the endpoint's reservation", "reservation", keep.GetId(), "address", keep.GetAddress())
		return r.useReservation(s, &keep)
	}

	// Whether a reservation may exist must be on record before it is
	// requested, so a deletion racing a lost answer still looks for it.
	if _, ok := pc.Annotations[infrav1.EndpointReservationAnnotation]; !ok {
		if err := r.markPending(ctx, pc); err != nil {
			return ctrl.Result{}, false, err
		}
	}
	res, err := c.ReservePublicIPv4(ctx, pc.Spec.Metro, endpointTags(pc, s.Cluster.Name))
	countEndpointStep("reserve", err)
	if err != nil {
		if metal.IsUnprocessable(err) {
			msg := fmt.Sprintf("the platform refused to reserve a public IPv4 address in metro %q (spec.metro): %s",
				pc.Spec.Metro, strings.Join(metal.ErrorMessages(err), "; "))
			if s.reasonChanges(cond, infrav1.EndpointReservationRefusedReason) {
				r.Recorder.Eventf(pc, nil, corev1.EventTypeWarning, infrav1.EndpointReservationRefusedReason, "ReserveEndpoint", "%s", msg)
			}
			s.observeFalse(cond, infrav1.EndpointReservationRefusedReason, msg)
			return ctrl.Result{RequeueAfter: r.backoff.next(pc.UID)}, false, nil
		}
		return r.endpointFailed(ctx, s, "reserving a public IPv4 address in metro "+pc.Spec.Metro, err)
	}
	ctrl.LoggerFrom(ctx).Info("Reserved the endpoint", "reservation", res.GetId(), "address", res.GetAddress())
	r.Recorder.Eventf(pc, nil, corev1.EventTypeNormal, "EndpointReserved", "ReserveEndpoint",
		"Reserved public IPv4 address %s (reservation %s) in metro %s", res.GetAddress(), res.GetId(), pc.Spec.Metro)
	return r.useReservation(s, res)
}

// markPending records, before the reservation is requested, that one may
// exist. It patches a copy, so what this reconcile changed in memory stays
// for the deferred patch.
func (r *PacketClusterReconciler) markPending(ctx context.Context, pc *infrav1.PacketCluster) error {
	base := pc.DeepCopy()
	marked := pc.DeepCopy()
	if marked.Annotations == nil {
		marked.Annotations = map[string]string{}
	}
	marked.Annotations[infrav1.EndpointReservationAnnotation] = infrav1.EndpointReservationPending
	if err := r.Client.Patch(ctx, marked, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("recording the pending endpoint reservation: %w", err)
	}
	if pc.Annotations == nil {
		pc.Annotations = map[string]string{}
	}
	pc.Annotations[infrav1.EndpointReservationAnnotation] = infrav1.EndpointReservationPending
	return nil
}

// useReservation makes the reservation the cluster's endpoint. An endpoint
// host already set is kept: the Cluster may be using it.
func (r *PacketClusterReconciler) useReservation(s *clusterScope, res *metalv1.IPReservation) (ctrl.Result, bool, error) {
	pc := s.PacketCluster
	ep := &pc.Spec.ControlPlaneEndpoint
	pc.Annotations[infrav1.EndpointReservationAnnotation] = res.GetId()
	if ep.Host == "" {
		ep.Host = res.GetAddress()
	}
	if ep.Port == 0 {
		ep.Port = defaultAPIServerPort
	}
	r.backoff.reset(pc.UID)
	s.observeTrue(infrav1.ControlPlaneEndpointReadyCondition, infrav1.ControlPlaneEndpointReservedReason, fmt.Sprintf(
		"spec.controlPlaneEndpoint %s is public IPv4 reservation %s (%s) in metro %s",
		hostPort(ep.Host, ep.Port), res.GetId(), res.GetAddress(), res.Metro.GetCode()))
	pc.Status.Initialization.Provisioned = ptr.To(true)
	return ctrl.Result{}, true, nil
}

// endpointFailed reports a failed Metal call on ControlPlaneEndpointReady
// and retries with backoff.
func (r *PacketClusterReconciler) endpointFailed(ctx context.Context, s *clusterScope, what string, err error) (ctrl.Result, bool, error) {
	pc := s.PacketCluster
	reason, msg := infrav1.MetalAPIErrorReason, fmt.Sprintf("%s: %v (retrying)", what, err)
	switch {
	case projectRefused(err):
		reason, msg = infrav1.ProjectNotFoundReason, fmt.Sprintf("%s: project %s (spec.projectID) does not exist or %s cannot reach it: %v",
			what, pc.Spec.ProjectID, s.source, err)
	case metal.IsUnauthorized(err):
		reason, msg = infrav1.InvalidCredentialsReason, fmt.Sprintf("%s: the Metal API refused the credentials of %s: %v", what, s.source, err)
	}
	ctrl.LoggerFrom(ctx).Info("Metal API call failed", "call", what, "error", err.Error())
	s.observeFalse(infrav1.ControlPlaneEndpointReadyCondition, reason, msg)
	return ctrl.Result{RequeueAfter: r.backoff.next(pc.UID)}, false, nil
}

// releaseEndpoint releases the reservation of the cluster's endpoint and is
// done only once the platform has none carrying the cluster's tag (nor the
// one the annotation names). A cluster that never had a reservation
// requested (no annotation) needs no Metal API. Whatever fails keeps the
// PacketCluster here, retried with backoff: a reservation is never leaked.
func (r *PacketClusterReconciler) releaseEndpoint(ctx context.Context, s *clusterScope) (ctrl.Result, bool, error) {
	pc := s.PacketCluster
	const cond = infrav1.DeletingCondition
	if _, managed := pc.Annotations[infrav1.EndpointReservationAnnotation]; !managed {
		return ctrl.Result{}, true, nil
	}
	if wait := r.backoff.waiting(pc.UID); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, false, nil
	}
	c, err := r.metal(ctx, s)
	if err != nil {
		if serr, ok := errors.AsType[*setupError](err); ok {
			s.observeTrue(cond, infrav1.ReleasingEndpointReason, "cannot release the endpoint's reservation: "+serr.message)
			return ctrl.Result{RequeueAfter: noCredentials}, false, nil
		}
		return ctrl.Result{}, false, err
	}
	found, err := r.endpointReservations(ctx, c, pc)
	if err != nil {
		return r.releaseFailed(ctx, s, "looking for the endpoint's reservation", err)
	}
	for _, res := range found {
		err := c.DeleteIPReservation(ctx, res.GetId())
		countEndpointStep("release", err)
		if err != nil {
			return r.releaseFailed(ctx, s, "releasing reservation "+res.GetId(), err)
		}
		ctrl.LoggerFrom(ctx).Info("Released the endpoint's reservation", "reservation", res.GetId(), "address", res.GetAddress())
		r.Recorder.Eventf(pc, nil, corev1.EventTypeNormal, "EndpointReleased", "ReleaseEndpoint",
			"Released public IPv4 reservation %s (%s)", res.GetId(), res.GetAddress())
	}
	if len(found) > 0 {
		if found, err = r.endpointReservations(ctx, c, pc); err != nil {
			return r.releaseFailed(ctx, s, "checking the endpoint's reservation is gone", err)
		}
	}
	if len(found) > 0 {
		ids := make([]string, len(found))
		for i, res := range found {
			ids[i] = res.GetId()
		}
		s.observeTrue(cond, infrav1.ReleasingEndpointReason, "waiting for reservation "+strings.Join(ids, ", ")+" to be gone")
		return ctrl.Result{RequeueAfter: minPoll}, false, nil
	}
	delete(pc.Annotations, infrav1.EndpointReservationAnnotation)
	r.backoff.reset(pc.UID)
	return ctrl.Result{}, true, nil
}

func (r *PacketClusterReconciler) releaseFailed(ctx context.Context, s *clusterScope, what string, err error) (ctrl.Result, bool, error) {
	ctrl.LoggerFrom(ctx).Info("Metal API call failed", "call", what, "error", err.Error())
	s.observeTrue(infrav1.DeletingCondition, infrav1.ReleasingEndpointReason, fmt.Sprintf("%s: %v (retrying)", what, err))
	return ctrl.Result{RequeueAfter: r.backoff.next(s.PacketCluster.UID)}, false, nil
}

// endpointReservations are the reservations the cluster holds: those
// carrying its tag, and the one its annotation names if it is provably the
// cluster's (another is left alone, and said so).
func (r *PacketClusterReconciler) endpointReservations(ctx context.Context, c *metal.Client, pc *infrav1.PacketCluster) ([]metalv1.IPReservation, error) {
	found, err := c.ListPublicIPv4Reservations(ctx, endpointTag(pc))
	if err != nil {
		return nil, err
	}
	id := pc.Annotations[infrav1.EndpointReservationAnnotation]
	if id == "" || id == infrav1.EndpointReservationPending || slices.ContainsFunc(found, func(r metalv1.IPReservation) bool { return r.GetId() == id }) {
		return found, nil
	}
	res, err := c.GetIPReservation(ctx, id)
	switch {
	case metal.IsNotFound(err):
		return found, nil
	case err != nil:
		return nil, err
	}
	if err := reservationOwned(ctx, r.Client, pc, res); err != nil {
		r.Recorder.Eventf(pc, nil, corev1.EventTypeWarning, infrav1.EndpointReservationNotOwnedReason, "ReleaseEndpoint",
			"Left reservation %s alone: %v", id, err)
		return found, nil
	}
	return append(found, *res), nil
}

// reservationOwned proves res is pc's endpoint reservation (device.Owned).
func reservationOwned(ctx context.Context, c client.Reader, pc *infrav1.PacketCluster, res *metalv1.IPReservation) error {
	ep := device.EndpointOf(res)
	return device.Owned("reservation", ep.ReservationID, ep.Project, ep.Tags, device.EndpointTagPrefix, endpointOwner(ctx, c, pc))
}

// pickReservation chooses the reservation to keep among those carrying the
// cluster's tag: the one already the endpoint's host, else the oldest.
func pickReservation(tagged []metalv1.IPReservation, host string) (keep metalv1.IPReservation, extra []metalv1.IPReservation) {
	sorted := slices.Clone(tagged)
	slices.SortStableFunc(sorted, func(a, b metalv1.IPReservation) int { return a.GetCreatedAt().Compare(b.GetCreatedAt()) })
	i := slices.IndexFunc(sorted, func(r metalv1.IPReservation) bool { return host != "" && r.GetAddress() == host })
	i = max(i, 0)
	keep = sorted[i]
	return keep, slices.Delete(sorted, i, i+1)
}

// endpointTag identifies the reservation of pc's endpoint.
func endpointTag(pc *infrav1.PacketCluster) string { return EndpointTagPrefix + string(pc.UID) }

// endpointTags are the tags of the reservation: the identifying one, and the
// cluster's and namespace's, which the cluster's devices carry too.
func endpointTags(pc *infrav1.PacketCluster, cluster string) []string {
	return []string{endpointTag(pc), device.ClusterTagPrefix + cluster, device.NamespaceTagPrefix + pc.Namespace}
}

func hostPort(host string, port int32) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}
