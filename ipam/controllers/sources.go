package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cappv1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/poolspace"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/cidr"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// sourceResult is what one source of a pool gave: its entries, or why it
// failed.
type sourceResult struct {
	// source is the Source of the entries, and the prefix of the sources of
	// the reservations of a VRF.
	source  string
	entries []v1alpha1.ResolvedAddresses
	failure *sourceFailure
	// vrf is the VRF as the pool's credentials read it; set for spec.vrf
	// when it resolved.
	vrf *v1alpha1.ResolvedVRF
	// readAt is when the source was read.
	readAt time.Time
}

// sourceFailure is a source that did not resolve, with the SourcesResolved
// reason. keep says whether the entries it last gave stay in use: yes when
// the failure may pass (Metal API down, credentials being rotated), no when
// the source says its addresses are gone or not the pool's to hand out.
type sourceFailure struct {
	reason  string
	message string
	keep    bool
}

// vrfAPI is the part of the Metal client the VRF source needs.
type vrfAPI interface {
	GetVRF(ctx context.Context, id string) (*metalv1.Vrf, error)
	ListVRFIPReservations(ctx context.Context, vrfID string) ([]metalv1.VrfIpReservation, error)
}

// errVRFMismatch: the VRF or its reservations are not what spec.vrf says.
var errVRFMismatch = errors.New("VRF does not match spec.vrf")

// sourceResolver reads the sources of pools: the Metal API for spec.vrf, the
// PacketCluster for spec.networkRef.
type sourceResolver struct {
	// reader reads Secrets live (RBAC grants get only): the manager caches none.
	reader client.Reader
	// client reads PacketClusters from the cache.
	client client.Client
	// packetClusters is false when the PacketCluster CRD is not installed.
	packetClusters bool
	// metal holds a Metal client per credentials Secret.
	metal *metal.ClientCache
	// reads keeps each pool's VRF read for up to maxAge (the resync period).
	reads  vrfReads
	maxAge time.Duration
	now    func() time.Time
}

// resolve reads every source of the pool.
func (r *sourceResolver) resolve(ctx context.Context, pool v1alpha1.Pool) ([]sourceResult, error) {
	var results []sourceResult
	if pool.PoolSpec().VRF != nil {
		result, fresh := r.reads.fresh(pool, r.now(), r.maxAge)
		if !fresh {
			result = r.resolveVRF(ctx, pool)
			result.readAt = r.now()
			r.reads.keep(pool, result)
		}
		results = append(results, result)
	}
	if pool.PoolSpec().NetworkRef != nil {
		result, err := r.resolveNetwork(ctx, pool)
		if err != nil {
			return nil, err
		}
		result.readAt = r.now()
		results = append(results, result)
	}
	return results, nil
}

func vrfSource(id string) string { return "vrf/" + id }

func (r *sourceResolver) resolveVRF(ctx context.Context, pool v1alpha1.Pool) sourceResult {
	src := pool.PoolSpec().VRF
	result := sourceResult{source: vrfSource(src.ID)}
	api, failure := r.metalClient(ctx, pool)
	if failure != nil {
		result.failure = failure
		return result
	}
	vrf, entries, err := vrfEntries(ctx, api, src)
	if err == nil {
		vrf.ProjectID = qualifiedProject(vrf.ProjectID, api.Endpoint())
	}
	switch {
	case err == nil && !givesAddresses(entries):
		result.failure = &sourceFailure{v1alpha1.VRFWithoutAddressesReason, fmt.Sprintf(
			"VRF %s gives the pool no address: it has no %s %s (spec.vrf.ipFamily, spec.vrf.scope)",
			src.ID, src.IPFamily, map[v1alpha1.VRFScope]string{
				v1alpha1.VRFScopeGatewaySubnets: "IP reservation served by a Metal Gateway",
				v1alpha1.VRFScopeIPRanges:       "ip_ranges",
			}[src.Scope]), false}
	case err == nil:
		result.vrf, result.entries = vrf, entries
	case metal.IsUnauthorized(err):
		result.failure = &sourceFailure{v1alpha1.InvalidCredentialsReason,
			fmt.Sprintf("the Metal API refused the credentials of Secret %s: %v", src.CredentialsRef.Name, err), true}
	case metal.IsNotFound(err):
		result.failure = &sourceFailure{v1alpha1.VRFNotFoundReason, fmt.Sprintf("VRF %s: %v", src.ID, err), false}
	case errors.Is(err, errVRFMismatch):
		result.failure = &sourceFailure{v1alpha1.VRFMismatchReason, err.Error(), false}
	default:
		result.failure = &sourceFailure{v1alpha1.MetalAPIUnavailableReason, fmt.Sprintf("reading VRF %s: %v", src.ID, err), true}
	}
	return result
}

// givesAddresses reports whether some entry is handed out from, not only a
// subnet other entries sit in.
func givesAddresses(entries []v1alpha1.ResolvedAddresses) bool {
	return slices.ContainsFunc(entries, func(e v1alpha1.ResolvedAddresses) bool { return !e.SubnetOnly })
}

// qualifiedProject is the project of a VRF as status.vrf records it, which
// names the pool's allocation domain: the project, followed for any endpoint
// but the public Metal API by "@" and the endpoint. Project and VRF IDs are
// only unique within one API: a pool whose credentials name another endpoint
// (one the operator allows) never shares the domain of the pools of the
// same IDs elsewhere, whatever that endpoint answers.
func qualifiedProject(project, endpoint string) string {
	if public, _ := metal.Endpoint(metal.DefaultBaseURL); endpoint == public {
		return project
	}
	return project + "@" + endpoint
}

// metalClient returns the client for the pool's credentials Secret.
func (r *sourceResolver) metalClient(ctx context.Context, pool v1alpha1.Pool) (*metal.Client, *sourceFailure) {
	key, ferr := poolspace.CredentialsSecret(pool)
	if ferr != nil {
		return nil, &sourceFailure{v1alpha1.InvalidCredentialsReason, ferr.Error(), false}
	}
	secret := &corev1.Secret{}
	if err := r.reader.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			r.metal.Forget(key)
			return nil, &sourceFailure{v1alpha1.CredentialsSecretNotFoundReason,
				fmt.Sprintf("credentials Secret %s not found (spec.vrf.credentialsRef)", key), true}
		}
		return nil, &sourceFailure{v1alpha1.CredentialsSecretNotFoundReason, fmt.Sprintf("reading credentials Secret %s: %v", key, err), true}
	}
	c, err := r.metal.ForSecret(secret)
	if endpoint, ok := errors.AsType[*metal.EndpointNotAllowedError](err); ok {
		return nil, &sourceFailure{v1alpha1.EndpointNotAllowedReason, endpoint.Error() + " (spec.vrf.credentialsRef)", false}
	}
	if err != nil {
		return nil, &sourceFailure{v1alpha1.InvalidCredentialsReason, err.Error(), true}
	}
	return c, nil
}

// vrfEntries reads a VRF and its IP reservations and returns what the pool
// gets from them. Every reservation served by a Metal Gateway is a subnet
// entry carrying its prefix and gateway, so the gateway is reserved and the
// addresses inside get them; with IPRanges the VRF's ranges are added as
// entries without a subnet of their own. It also returns the VRF's identity
// as the API showed it: what puts the pool in an allocation domain.
func vrfEntries(ctx context.Context, api vrfAPI, src *v1alpha1.VRFSource) (*v1alpha1.ResolvedVRF, []v1alpha1.ResolvedAddresses, error) {
	vrf, err := api.GetVRF(ctx, src.ID)
	if err != nil {
		return nil, nil, err
	}
	project := vrf.GetProject()
	identity := &v1alpha1.ResolvedVRF{ID: vrf.GetId(), ProjectID: path.Base(project.GetHref())}
	if src.ProjectID != "" {
		if id := identity.ProjectID; id != src.ProjectID {
			return nil, nil, fmt.Errorf("%w: VRF %s belongs to project %s, not spec.vrf.projectID %s", errVRFMismatch, src.ID, id, src.ProjectID)
		}
	}
	if src.Metro != "" {
		metro := vrf.GetMetro()
		if code := metro.GetCode(); code != src.Metro {
			return nil, nil, fmt.Errorf("%w: VRF %s is in metro %s, not spec.vrf.metro %s", errVRFMismatch, src.ID, code, src.Metro)
		}
	}
	reservations, err := api.ListVRFIPReservations(ctx, src.ID)
	if err != nil {
		return nil, nil, err
	}

	family := cidr.IPv4
	if src.IPFamily == v1alpha1.IPv6Family {
		family = cidr.IPv6
	}
	var entries []v1alpha1.ResolvedAddresses
	if src.Scope == v1alpha1.VRFScopeIPRanges {
		for _, r := range vrf.GetIpRanges() {
			if p, err := netip.ParsePrefix(r); err == nil && cidr.FamilyOf(p.Addr()) == family {
				entries = append(entries, v1alpha1.ResolvedAddresses{Address: p.Masked().String(), Source: vrfSource(src.ID)})
			}
		}
	}
	selected := map[string]bool{}
	for _, res := range reservations {
		subnet, gateway, ok := gatewaySubnet(res)
		if !ok || cidr.FamilyOf(subnet.Addr()) != family {
			continue
		}
		only := src.Scope == v1alpha1.VRFScopeGatewaySubnets && len(src.ReservationIDs) > 0 && !slices.Contains(src.ReservationIDs, res.GetId())
		if !only {
			selected[res.GetId()] = true
		}
		entries = append(entries, v1alpha1.ResolvedAddresses{
			Address:    subnet.String(),
			Prefix:     ptr.To(int32(subnet.Bits())),
			Gateway:    gateway.String(),
			Source:     vrfSource(src.ID) + "/reservation/" + res.GetId(),
			SubnetOnly: only,
		})
	}
	var missing []string
	for _, id := range src.ReservationIDs {
		if !selected[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("%w: spec.vrf.reservationIDs %s are not %s IP reservations of VRF %s served by a Metal Gateway",
			errVRFMismatch, strings.Join(missing, ", "), family, src.ID)
	}
	return identity, entries, nil
}

// gatewaySubnet returns the subnet of a reservation served by a Metal
// Gateway, and the gateway's address: the one the gateway reports, or the
// subnet's first host address, which is where Metal always puts it.
func gatewaySubnet(res metalv1.VrfIpReservation) (netip.Prefix, netip.Addr, bool) {
	if res.MetalGateway == nil || res.MetalGateway.GetState() == metalv1.METALGATEWAYSTATE_DELETING {
		return netip.Prefix{}, netip.Addr{}, false
	}
	network, err := netip.ParseAddr(res.GetNetwork())
	if err != nil {
		return netip.Prefix{}, netip.Addr{}, false
	}
	subnet := netip.PrefixFrom(network, int(res.GetCidr())).Masked()
	if gw, err := netip.ParsePrefix(res.MetalGateway.GetGatewayAddress()); err == nil && subnet.Contains(gw.Addr()) {
		return subnet, gw.Addr(), true
	}
	return subnet, subnet.Addr().Next(), true
}

func networkSource(ref *v1alpha1.NetworkReference) string {
	return "packetcluster/" + ref.Name + "/" + ref.Network
}

// resolveNetwork reads the pool's PacketCluster network. Errors other than
// the PacketCluster's absence are returned: the cache answers them, and a
// retry with backoff is the right response.
func (r *sourceResolver) resolveNetwork(ctx context.Context, pool v1alpha1.Pool) (sourceResult, error) {
	ref := pool.PoolSpec().NetworkRef
	result := sourceResult{source: networkSource(ref)}
	fail := func(reason, format string, args ...any) (sourceResult, error) {
		result.failure = &sourceFailure{reason, fmt.Sprintf(format, args...), false}
		return result, nil
	}
	if pool.GetNamespace() == "" {
		return fail(v1alpha1.PacketClusterNotFoundReason, "spec.networkRef: a GlobalMetalVRFIPPool has no namespace to find PacketCluster %q in", ref.Name)
	}
	if !r.packetClusters {
		return fail(v1alpha1.PacketClusterNotFoundReason, "spec.networkRef: the PacketCluster CRD is not installed")
	}
	cluster := &cappv1.PacketCluster{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: pool.GetNamespace(), Name: ref.Name}, cluster); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return fail(v1alpha1.PacketClusterNotFoundReason, "PacketCluster %s/%s not found (spec.networkRef)", pool.GetNamespace(), ref.Name)
		}
		return result, err
	}
	i := slices.IndexFunc(cluster.Spec.Networks, func(n cappv1.NetworkSpec) bool { return n.Name == ref.Network })
	if i < 0 {
		return fail(v1alpha1.NetworkNotFoundReason, "PacketCluster %s has no network %s in spec.networks", ref.Name, message.Quote(ref.Network))
	}
	network := cluster.Spec.Networks[i]
	if network.Assignment != cappv1.AssignmentClusterAPI {
		return fail(v1alpha1.NetworkNotClusterAPIReason,
			"network %s of PacketCluster %s has assignment %q: its addresses are not handed out by Cluster API, so the pool does not serve them (set spec.networks[%d].assignment: %s)",
			message.Quote(ref.Network), ref.Name, network.Assignment, i, cappv1.AssignmentClusterAPI)
	}
	family, known := poolspace.Family(pool.PoolSpec())
	var otherFamily []string
	for _, entry := range network.IPAddresses {
		p, err := netip.ParsePrefix(entry)
		if err != nil {
			continue // the PacketCluster's schema admits CIDRs only
		}
		if !known {
			family, known = cidr.FamilyOf(p.Addr()), true
		}
		if cidr.FamilyOf(p.Addr()) != family {
			otherFamily = append(otherFamily, entry)
			continue
		}
		result.entries = append(result.entries, v1alpha1.ResolvedAddresses{
			Address: p.Masked().String(), Prefix: ptr.To(int32(p.Bits())), Source: result.source,
		})
	}
	switch {
	case len(result.entries) > 0:
		return result, nil
	case len(otherFamily) > 0:
		return fail(v1alpha1.NetworkWithoutAddressesReason,
			"network %s of PacketCluster %s gives the pool no address: its spec.networks[%d].ipAddresses %s are not %s, the family %s fixes",
			message.Quote(ref.Network), ref.Name, i, message.Quote(strings.Join(otherFamily, ", ")), family, poolspace.FamilyField(pool.PoolSpec()))
	}
	return fail(v1alpha1.NetworkWithoutAddressesReason,
		"network %s of PacketCluster %s gives the pool no address: its spec.networks[%d].ipAddresses is empty", message.Quote(ref.Network), ref.Name, i)
}
