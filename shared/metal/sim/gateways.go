package sim

import (
	"fmt"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// gateway is a VRF Metal Gateway: it routes a VRF IP reservation's subnet on
// a VLAN, at the subnet's first host address. Gateways come from the seed.
type gateway struct {
	record
	reservationID string
	vlanID        string
	state         metalv1.MetalGatewayState
}

// addGateway checks that g joins a reservation and a VLAN of its project in
// the same metro, neither of which has a gateway yet, and stores it.
func (w *world) addGateway(g *gateway, now time.Time) error {
	res, ok := w.reservations[g.reservationID]
	if !ok || res.projectID != g.projectID {
		return fmt.Errorf("IP reservation %s not found in the project", g.reservationID)
	}
	vn, ok := w.vlans[g.vlanID]
	if !ok || vn.projectID != g.projectID {
		return fmt.Errorf("virtual network %s not found in the project", g.vlanID)
	}
	if v := w.vrfs[res.vrfID]; vn.metro != v.metro {
		return fmt.Errorf("VLAN %d is in metro %s but VRF %s is in %s", vn.vxlan, vn.metro, v.name, v.metro)
	}
	if other := w.gatewayOf(res.id); other != nil {
		return fmt.Errorf("IP reservation %s already has Metal Gateway %s", res.prefix, other.id)
	}
	for _, other := range w.gateways {
		if other.vlanID == vn.id {
			return fmt.Errorf("VLAN %d already has Metal Gateway %s", vn.vxlan, other.id)
		}
	}
	if g.state == "" {
		g.state = metalv1.METALGATEWAYSTATE_READY
	}
	if !g.state.IsValid() {
		return fmt.Errorf("%q is not a Metal Gateway state (%v)", g.state, metalv1.AllowedMetalGatewayStateEnumValues)
	}
	return store(w, w.gateways, g, now)
}

// gatewayOf returns the gateway serving a reservation, nil if there is none.
func (w *world) gatewayOf(reservationID string) *gateway {
	for _, g := range w.gateways {
		if g.reservationID == reservationID {
			return g
		}
	}
	return nil
}

// apiGatewayLite is the summary of a gateway that reservations and VLANs
// carry.
func (w *world) apiGatewayLite(g *gateway) *metalv1.MetalGatewayLite {
	res, vn := w.reservations[g.reservationID], w.vlans[g.vlanID]
	return &metalv1.MetalGatewayLite{
		Id:             &g.id,
		Href:           metalv1.PtrString(href("metal-gateways", g.id)),
		State:          &g.state,
		GatewayAddress: metalv1.PtrString(fmt.Sprintf("%s/%d", gatewayAddress(res.prefix), res.prefix.Bits())),
		Vlan:           &vn.vxlan,
		CreatedAt:      &g.created,
		UpdatedAt:      &g.created,
	}
}

// apiGateway renders a gateway, expanding the references the request
// included. Without include=ip_reservation the API answers the reservation
// as a bare {"href"}, which the SDK cannot decode as either gateway type:
// hence clients must include it. VrfMetalGateway cannot express that bare
// reference (VrfIpReservation's required type and vrf would be marshalled
// empty), so the answer is the SDK's map form with the reference patched in.
func (w *world) apiGateway(g *gateway, inc includes) (map[string]any, error) {
	res, vn := w.reservations[g.reservationID], w.vlans[g.vlanID]
	v := w.vrfs[res.vrfID]
	out := metalv1.VrfMetalGateway{
		Id:             &g.id,
		Href:           metalv1.PtrString(href("metal-gateways", g.id)),
		State:          &g.state,
		Project:        projectRef(g.projectID),
		VirtualNetwork: &metalv1.VirtualNetwork{Href: metalv1.PtrString(href("virtual-networks", vn.id))},
		Vrf:            &metalv1.Vrf{Href: metalv1.PtrString(href("vrfs", v.id))},
		CreatedAt:      &g.created,
		UpdatedAt:      &g.created,
	}
	if inc["virtual_network"] {
		full := w.apiVirtualNetwork(vn)
		out.VirtualNetwork = &full
	}
	if inc["vrf"] {
		full := apiVRF(v)
		out.Vrf = &full
	}
	if inc["ip_reservation"] {
		full := w.apiReservation(res)
		out.IpReservation = &full
	}
	m, err := out.ToMap()
	if err == nil && !inc["ip_reservation"] {
		m["ip_reservation"] = ref("ips", res.id)
	}
	return m, err
}

// gatewayList is metalv1.MetalGatewayList with gateways in map form (see
// apiGateway).
type gatewayList struct {
	MetalGateways []map[string]any `json:"metal_gateways"`
	Meta          *metalv1.Meta    `json:"meta"`
}

// GET /projects/{id}/metal-gateways[?include=&page=&per_page=]
func (s *Server) listGateways(r *request) (reply, error) {
	p, err := find(r, s.world.projects, "id")
	if err != nil {
		return reply{}, err
	}
	page, meta, err := paginate(r.Request, sorted(s.world.gateways, inProject[*gateway](p.id)))
	if err != nil {
		return reply{}, err
	}
	inc := includesOf(r.Request)
	out := gatewayList{MetalGateways: make([]map[string]any, len(page)), Meta: meta}
	for i, g := range page {
		if out.MetalGateways[i], err = s.world.apiGateway(g, inc); err != nil {
			return reply{}, err
		}
	}
	return ok(out)
}

// GET /metal-gateways/{id}[?include=]
func (s *Server) getGateway(r *request) (reply, error) {
	g, err := find(r, s.world.gateways, "id")
	if err != nil {
		return reply{}, err
	}
	out, err := s.world.apiGateway(g, includesOf(r.Request))
	if err != nil {
		return reply{}, err
	}
	return ok(out)
}
