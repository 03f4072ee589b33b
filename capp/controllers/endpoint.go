package controllers

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
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
// given, the fact of an endpoint the user set or that nothing can set.
type endpointPlan struct {
	reserve bool
	vip     bool
	given   clusterEndpointFact
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
		return endpointPlan{given: endpointSetByUser{endpoint: hostPort(ep.Host, cmp.Or(ep.Port, defaultAPIServerPort))}}
	}
	switch pc.Spec.VIPManager {
	case infrav1.VIPManagerKubeVIP, infrav1.VIPManagerEMLB:
		return endpointPlan{given: endpointMissing{vipManager: pc.Spec.VIPManager}}
	}
	if pc.Spec.Metro == "" {
		return endpointPlan{given: endpointMissing{vipManager: infrav1.VIPManagerCPEM}}
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
	plan := planEndpoint(pc)
	if plan.vip {
		return r.reconcileVIP(ctx, s)
	}
	if !plan.reserve {
		s.facts.endpoint = plan.given
		if _, userSet := plan.given.(endpointSetByUser); !userSet {
			return ctrl.Result{}, false, nil
		}
		if pc.Spec.ControlPlaneEndpoint.Port == 0 {
			pc.Spec.ControlPlaneEndpoint.Port = defaultAPIServerPort
		}
		return ctrl.Result{}, true, nil
	}
	x, result, ok, err := openMetal(s.turn, func(f *setupError) { s.facts.endpoint = f }, func() (*device.Executor, error) { return r.metal(ctx, s) })
	if !ok {
		return result, false, err
	}
	id := pc.Annotations[infrav1.EndpointReservationAnnotation]
	if id != "" && id != infrav1.EndpointReservationPending {
		return r.recordedReservation(ctx, s, x, id)
	}
	return r.newReservation(ctx, s, x)
}

// recordedReservation uses the reservation the annotation names, once it is
// proven the cluster's.
func (r *PacketClusterReconciler) recordedReservation(ctx context.Context, s *clusterScope, x *device.Executor, id string) (ctrl.Result, bool, error) {
	pc := s.PacketCluster
	ep, err := x.ReadEndpoint(ctx, id, endpointOwner(ctx, r.Client, pc))
	if nerr, ok := notOwned(err); ok {
		s.facts.endpoint = reservationNotOwned{id: id, err: nerr}
		return ctrl.Result{RequeueAfter: slowPoll}, false, nil
	}
	switch {
	case metal.IsNotFound(err):
		s.facts.endpoint = reservationGone{id: id, host: pc.Spec.ControlPlaneEndpoint.Host}
		return ctrl.Result{RequeueAfter: slowPoll}, false, nil
	case err != nil:
		return r.endpointFailed(ctx, s, func(f metalCallFailed) { s.facts.endpoint = f }, "reading reservation "+id, err)
	}
	return r.useReservation(s, ep)
}

// newReservation adopts the reservation carrying the cluster's tag (a
// reserve whose answer was lost, a restart), or reserves one
// (device.PlanReservation).
func (r *PacketClusterReconciler) newReservation(ctx context.Context, s *clusterScope, x *device.Executor) (ctrl.Result, bool, error) {
	pc := s.PacketCluster
	tagged, err := x.FindEndpoints(ctx, endpointTag(pc))
	if err != nil {
		return r.endpointFailed(ctx, s, func(f metalCallFailed) { s.facts.endpoint = f }, "listing the project's public IPv4 reservations", err)
	}
	plan := device.PlanReservation(tagged, pc.Spec.ControlPlaneEndpoint.Host)
	if !plan.Reserve {
		for _, extra := range plan.Release {
			err := x.ReleaseEndpoint(ctx, extra)
			countEndpointStep("release", err)
			if err != nil {
				return r.endpointFailed(ctx, s, func(f metalCallFailed) { s.facts.endpoint = f }, "releasing the surplus reservation "+extra.ReservationID, err)
			}
			r.Recorder.Eventf(pc, nil, corev1.EventTypeNormal, "EndpointReservationReleased", "ReserveEndpoint",
				"Released surplus reservation %s (%s) carrying this cluster's tag", extra.ReservationID, extra.Address)
		}
		ctrl.LoggerFrom(ctx).Info("Adopted the endpoint's reservation", "reservation", plan.Keep.ReservationID, "address", plan.Keep.Address)
		return r.useReservation(s, plan.Keep)
	}

	// Whether a reservation may exist must be on record before it is
	// requested, so a deletion racing a lost answer still looks for it.
	if _, ok := pc.Annotations[infrav1.EndpointReservationAnnotation]; !ok {
		if err := r.markPending(ctx, pc); err != nil {
			return ctrl.Result{}, false, err
		}
	}
	ep, err := x.ReserveEndpoint(ctx, pc.Spec.Metro, endpointTags(pc, s.Cluster.Name))
	countEndpointStep("reserve", err)
	if err != nil {
		if metal.IsUnprocessable(err) {
			s.facts.endpoint = reservationRefused{metro: pc.Spec.Metro, messages: metal.ErrorMessages(err)}
			warnOnChange(r.Recorder, pc, controlPlaneEndpointReady(s.facts.endpoint), "ReserveEndpoint")
			return ctrl.Result{RequeueAfter: s.turn.RetryAfter()}, false, nil
		}
		return r.endpointFailed(ctx, s, func(f metalCallFailed) { s.facts.endpoint = f }, "reserving a public IPv4 address in metro "+pc.Spec.Metro, err)
	}
	ctrl.LoggerFrom(ctx).Info("Reserved the endpoint", "reservation", ep.ReservationID, "address", ep.Address)
	r.Recorder.Eventf(pc, nil, corev1.EventTypeNormal, "EndpointReserved", "ReserveEndpoint",
		"Reserved public IPv4 address %s (reservation %s) in metro %s", ep.Address, ep.ReservationID, pc.Spec.Metro)
	return r.useReservation(s, ep)
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
func (r *PacketClusterReconciler) useReservation(s *clusterScope, res device.Endpoint) (ctrl.Result, bool, error) {
	pc := s.PacketCluster
	ep := &pc.Spec.ControlPlaneEndpoint
	pc.Annotations[infrav1.EndpointReservationAnnotation] = res.ReservationID
	if ep.Host == "" {
		ep.Host = res.Address
	}
	if ep.Port == 0 {
		ep.Port = defaultAPIServerPort
	}
	s.facts.endpoint = endpointReserved{endpoint: hostPort(ep.Host, ep.Port), id: res.ReservationID, address: res.Address, metro: res.Metro}
	return ctrl.Result{}, true, nil
}

// endpointFailed records a failed Metal call as the fact of the phase that
// made it (into, which puts it in the phase's slot) and retries with
// backoff.
func (r *PacketClusterReconciler) endpointFailed(ctx context.Context, s *clusterScope, into func(metalCallFailed), what string, err error) (ctrl.Result, bool, error) {
	ctrl.LoggerFrom(ctx).Info("Metal API call failed", "call", what, "error", err.Error())
	into(metalCallFailed{what: what, err: err, source: s.source, project: s.PacketCluster.Spec.ProjectID})
	return ctrl.Result{RequeueAfter: s.turn.RetryAfter()}, false, nil
}

// releaseEndpoint releases the reservation of the cluster's endpoint and is
// done only once the platform has none carrying the cluster's tag (nor the
// one the annotation names). A cluster that never had a reservation
// requested (no annotation) needs no Metal API. Whatever fails keeps the
// PacketCluster here, retried with backoff: a reservation is never leaked.
func (r *PacketClusterReconciler) releaseEndpoint(ctx context.Context, s *clusterScope) (ctrl.Result, bool, error) {
	pc := s.PacketCluster
	if _, managed := pc.Annotations[infrav1.EndpointReservationAnnotation]; !managed {
		return ctrl.Result{}, true, nil
	}
	x, result, ok, err := openMetal(s.turn, func(f *setupError) { s.facts.deletion = f }, func() (*device.Executor, error) { return r.metal(ctx, s) })
	if !ok {
		return result, false, err
	}
	found, err := r.endpointReservations(ctx, x, pc)
	if err != nil {
		return r.endpointFailed(ctx, s, func(f metalCallFailed) { s.facts.deletion = f }, "looking for the endpoint's reservation", err)
	}
	for _, res := range found {
		err := x.ReleaseEndpoint(ctx, res)
		countEndpointStep("release", err)
		if err != nil {
			return r.endpointFailed(ctx, s, func(f metalCallFailed) { s.facts.deletion = f }, "releasing reservation "+res.ReservationID, err)
		}
		ctrl.LoggerFrom(ctx).Info("Released the endpoint's reservation", "reservation", res.ReservationID, "address", res.Address)
		r.Recorder.Eventf(pc, nil, corev1.EventTypeNormal, "EndpointReleased", "ReleaseEndpoint",
			"Released public IPv4 reservation %s (%s)", res.ReservationID, res.Address)
	}
	if len(found) > 0 {
		if found, err = r.endpointReservations(ctx, x, pc); err != nil {
			return r.endpointFailed(ctx, s, func(f metalCallFailed) { s.facts.deletion = f }, "checking the endpoint's reservation is gone", err)
		}
	}
	if len(found) > 0 {
		ids := make([]string, len(found))
		for i, res := range found {
			ids[i] = res.ReservationID
		}
		s.facts.deletion = reservationsGoing{ids: ids}
		return ctrl.Result{RequeueAfter: minPoll}, false, nil
	}
	delete(pc.Annotations, infrav1.EndpointReservationAnnotation)
	return ctrl.Result{}, true, nil
}

// endpointReservations are the reservations the cluster holds: those
// carrying its tag, and the one its annotation names if it is provably the
// cluster's (another is left alone, and said so).
func (r *PacketClusterReconciler) endpointReservations(ctx context.Context, x *device.Executor, pc *infrav1.PacketCluster) ([]device.Endpoint, error) {
	found, err := x.FindEndpoints(ctx, endpointTag(pc))
	if err != nil {
		return nil, err
	}
	id := pc.Annotations[infrav1.EndpointReservationAnnotation]
	if id == "" || id == infrav1.EndpointReservationPending || slices.ContainsFunc(found, func(e device.Endpoint) bool { return e.ReservationID == id }) {
		return found, nil
	}
	ep, err := x.ReadEndpoint(ctx, id, endpointOwner(ctx, r.Client, pc))
	if nerr, ok := notOwned(err); ok {
		r.Recorder.Eventf(pc, nil, corev1.EventTypeWarning, infrav1.EndpointReservationNotOwnedReason, "ReleaseEndpoint",
			"Left reservation %s alone: %v", id, nerr)
		return found, nil
	}
	switch {
	case metal.IsNotFound(err):
		return found, nil
	case err != nil:
		return nil, err
	}
	return append(found, ep), nil
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
