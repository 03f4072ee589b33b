package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// reservation is a VRF IP reservation: a subnet of a VRF range, which a Metal
// Gateway can serve.
type reservation struct {
	record
	vrfID      string
	prefix     netip.Prefix
	tags       []string
	details    string
	customdata map[string]any
}

// reservationPrefix checks a reservation's network and cidr against the
// platform's size limits (IPv4 /22 to /29, IPv6 /64).
func reservationPrefix(network string, cidr int) (netip.Prefix, error) {
	addr, err := netip.ParseAddr(network)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("network %q is not an IP address", network)
	}
	if addr.Is4() && (cidr < 22 || cidr > 29) {
		return netip.Prefix{}, fmt.Errorf("cidr must be between 22 and 29 for an IPv4 VRF IP reservation, got %d", cidr)
	}
	if addr.Is6() && cidr != 64 {
		return netip.Prefix{}, fmt.Errorf("cidr must be 64 for an IPv6 VRF IP reservation, got %d", cidr)
	}
	p := netip.PrefixFrom(addr, cidr)
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("network %s is not the first address of a /%d (that would be %s)", addr, cidr, p.Masked().Addr())
	}
	return p, nil
}

// addReservation checks that res lies inside a range of its VRF and overlaps
// none of the VRF's reservations, and stores it.
func (w *world) addReservation(res *reservation, now time.Time) error {
	v, ok := w.vrfs[res.vrfID]
	if !ok || v.projectID != res.projectID {
		return fmt.Errorf("VRF %s not found in the project", res.vrfID)
	}
	p := res.prefix
	if !slices.ContainsFunc(v.ranges, func(r netip.Prefix) bool { return r.Bits() <= p.Bits() && r.Contains(p.Addr()) }) {
		return fmt.Errorf("%s is not within any IP range of VRF %s (%v)", p, v.name, v.ranges)
	}
	for _, other := range sorted(w.reservations, func(o *reservation) bool { return o.vrfID == v.id }) {
		if other.prefix.Overlaps(p) {
			return fmt.Errorf("%s overlaps VRF IP reservation %s (%s)", p, other.prefix, other.id)
		}
	}
	return store(w, w.reservations, res, now)
}

func (w *world) apiReservation(res *reservation) metalv1.VrfIpReservation {
	v := w.vrfs[res.vrfID]
	family := int32(4)
	if res.prefix.Addr().Is6() {
		family = 6
	}
	out := metalv1.VrfIpReservation{
		Id:            &res.id,
		Href:          metalv1.PtrString(href("ips", res.id)),
		Type:          metalv1.VRFIPRESERVATIONTYPE_VRF,
		Vrf:           apiVRF(v),
		Network:       metalv1.PtrString(res.prefix.Addr().String()),
		Address:       metalv1.PtrString(res.prefix.Addr().String()),
		Cidr:          metalv1.PtrInt32(int32(res.prefix.Bits())),
		AddressFamily: &family,
		Netmask:       metalv1.PtrString(netmask(res.prefix)),
		Gateway:       metalv1.PtrString(gatewayAddress(res.prefix).String()),
		State:         metalv1.PtrString("created"),
		Public:        metalv1.PtrBool(false),
		Management:    metalv1.PtrBool(false),
		Manageable:    metalv1.PtrBool(true),
		Bill:          metalv1.PtrBool(false),
		Project:       projectRef(res.projectID),
		Metro:         apiMetro(v.metro),
		Tags:          nonNil(res.tags),
		Customdata:    res.customdata,
		CreatedAt:     &res.created,
	}
	if res.details != "" {
		out.Details = &res.details
	}
	if g := w.gatewayOf(res.id); g != nil {
		out.MetalGateway = w.apiGatewayLite(g)
	}
	return out
}

// GET /vrfs/{id}/ips
func (s *Server) listReservations(r *request) (reply, error) {
	v, err := find(r, s.world.vrfs, "id")
	if err != nil {
		return reply{}, err
	}
	reservations := sorted(s.world.reservations, func(res *reservation) bool { return res.vrfID == v.id })
	return ok(metalv1.VrfIpReservationList{IpAddresses: render(reservations, s.world.apiReservation)})
}

// GET /vrfs/{vrf}/ips/{id}
func (s *Server) getReservation(r *request) (reply, error) {
	v, err := find(r, s.world.vrfs, "vrf")
	if err != nil {
		return reply{}, err
	}
	res, err := find(r, s.world.reservations, "id")
	if err != nil || res.vrfID != v.id {
		return reply{}, errNotFound
	}
	return ok(s.world.apiReservation(res))
}

// POST /projects/{id}/ips. VRF reservations and single public IPv4
// addresses are simulated; the body's type says which.
func (s *Server) createReservation(r *request) (reply, error) {
	p, err := find(r, s.world.projects, "id")
	if err != nil {
		return reply{}, err
	}
	var raw json.RawMessage
	if err := decode(r.Request, &raw); err != nil {
		return reply{}, err
	}
	var kind struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &kind) // raw is valid JSON; a non-object has no type
	switch kind.Type {
	case string(metalv1.VRFIPRESERVATIONTYPE_VRF):
	case string(metalv1.IPRESERVATIONTYPE_PUBLIC_IPV4):
		return s.createPublicIP(r, p.id, raw)
	default:
		return reply{}, errorf(http.StatusUnprocessableEntity, "type %q is not supported by the simulator, only %q and %q",
			kind.Type, metalv1.VRFIPRESERVATIONTYPE_VRF, metalv1.IPRESERVATIONTYPE_PUBLIC_IPV4)
	}
	var in metalv1.VrfIpReservationCreateInput
	if err := json.Unmarshal(raw, &in); err != nil {
		return reply{}, errorf(http.StatusUnprocessableEntity, "invalid request: %v", err)
	}
	prefix, err := reservationPrefix(in.Network, int(in.Cidr))
	if err != nil {
		return reply{}, unprocessable(err)
	}
	res := &reservation{
		record:     record{projectID: p.id},
		vrfID:      in.VrfId,
		prefix:     prefix,
		tags:       in.Tags,
		customdata: in.Customdata,
	}
	if in.Details != nil {
		res.details = *in.Details
	}
	if err := s.world.addReservation(res, r.now); err != nil {
		return reply{}, unprocessable(err)
	}
	return created(s.world.apiReservation(res))
}

// DELETE /ips/{id}: a public or a VRF reservation.
func (s *Server) deleteReservation(r *request) (reply, error) {
	if res, err := find(r, s.world.publicIPs, "id"); err == nil {
		if a := res.assignment; a != nil {
			return reply{}, errorf(http.StatusUnprocessableEntity, "address %s is assigned to device %s: unassign it before deleting the reservation", res.addr, a.deviceID)
		}
		delete(s.world.publicIPs, res.id)
		return noContent()
	}
	res, err := find(r, s.world.reservations, "id")
	if err != nil {
		return reply{}, err
	}
	if g := s.world.gatewayOf(res.id); g != nil {
		return reply{}, errorf(http.StatusUnprocessableEntity, "the IP reservation is in use by Metal Gateway %s", g.id)
	}
	delete(s.world.reservations, res.id)
	return noContent()
}
