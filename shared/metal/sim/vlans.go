package sim

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// virtualNetwork is a VLAN of a metro. The seed creates them.
type virtualNetwork struct {
	record
	vxlan       int32
	metro       string
	description string
	tags        []string
}

// addVirtualNetwork checks that vn's VLAN ID is valid and unique in its
// project's metro, and stores it.
func (w *world) addVirtualNetwork(vn *virtualNetwork, now time.Time) error {
	if err := checkMetro(vn.metro); err != nil {
		return err
	}
	if vn.vxlan < 2 || vn.vxlan > 3999 {
		return fmt.Errorf("vxlan %d is out of range (2-3999)", vn.vxlan)
	}
	for _, other := range w.vlans {
		if other.projectID == vn.projectID && other.metro == vn.metro && other.vxlan == vn.vxlan {
			return fmt.Errorf("VLAN %d already exists in metro %s", vn.vxlan, vn.metro)
		}
	}
	return store(w, w.vlans, vn, now)
}

// resolveVLAN finds the VLAN a port request names: by UUID or by VLAN ID
// (vxlan), which the API accepts alike. It must be a VLAN of the device's
// project and metro.
func (w *world) resolveVLAN(d *device, vnid string) (*virtualNetwork, error) {
	if vn, ok := w.vlans[vnid]; ok && vn.projectID == d.projectID {
		if vn.metro != d.metro {
			return nil, fmt.Errorf("VLAN %d is in metro %s, the device in %s", vn.vxlan, vn.metro, d.metro)
		}
		return vn, nil
	}
	if vxlan, err := strconv.ParseInt(vnid, 10, 32); err == nil {
		for _, vn := range w.vlans {
			if vn.projectID == d.projectID && vn.metro == d.metro && vn.vxlan == int32(vxlan) {
				return vn, nil
			}
		}
	}
	return nil, fmt.Errorf("virtual network %q not found in metro %s", vnid, d.metro)
}

func (w *world) apiVirtualNetwork(vn *virtualNetwork) metalv1.VirtualNetwork {
	gateways := sorted(w.gateways, func(g *gateway) bool { return g.vlanID == vn.id })
	devices := sorted(w.devices, func(d *device) bool {
		return slices.ContainsFunc(d.ports, func(id string) bool { return slices.Contains(w.ports[id].vlans, vn.id) })
	})
	return metalv1.VirtualNetwork{
		Id:                       &vn.id,
		Href:                     metalv1.PtrString(href("virtual-networks", vn.id)),
		Vxlan:                    &vn.vxlan,
		MetroCode:                &vn.metro,
		Metro:                    apiMetro(vn.metro),
		Description:              &vn.description,
		Tags:                     nonNil(vn.tags),
		AssignedTo:               projectRef(vn.projectID),
		AssignedToVirtualCircuit: metalv1.PtrBool(false),
		MetalGateways:            render(gateways, func(g *gateway) metalv1.MetalGatewayLite { return *w.apiGatewayLite(g) }),
		Instances:                render(devices, func(d *device) metalv1.Device { return metalv1.Device{Href: metalv1.PtrString(href("devices", d.id))} }),
		CreatedAt:                &vn.created,
	}
}

// GET /projects/{id}/virtual-networks[?metro=]
func (s *Server) listVirtualNetworks(r *request) (reply, error) {
	p, err := find(r, s.world.projects, "id")
	if err != nil {
		return reply{}, err
	}
	metro := r.URL.Query().Get("metro")
	vlans := sorted(s.world.vlans, func(vn *virtualNetwork) bool { return vn.projectID == p.id && matchesMetro(metro, vn.metro) })
	return ok(metalv1.VirtualNetworkList{VirtualNetworks: render(vlans, s.world.apiVirtualNetwork)})
}

// GET /virtual-networks/{id}
func (s *Server) getVirtualNetwork(r *request) (reply, error) {
	vn, err := find(r, s.world.vlans, "id")
	if err != nil {
		return reply{}, err
	}
	return ok(s.world.apiVirtualNetwork(vn))
}
