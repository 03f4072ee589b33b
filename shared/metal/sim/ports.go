package sim

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// port is one of a device's network ports: bond0, or eth0/eth1 which are
// members of bond0 while bonded.
type port struct {
	record
	deviceID string
	name     string
	mac      string
	bonded   bool     // eth ports only
	vlans    []string // assigned virtual network IDs, in assignment order
	native   string   // the native virtual network ID, if any
}

func (p *port) isBond() bool { return p.name == "bond0" }

// members are the eth ports of a device's bond.
func (w *world) members(d *device) []*port {
	out := make([]*port, 0, len(d.ports)-1)
	for _, id := range d.ports[1:] {
		out = append(out, w.ports[id])
	}
	return out
}

func (w *world) bond0(d *device) *port { return w.ports[d.ports[0]] }

// networkType is the device's composite network type, which every one of its
// ports reports:
//
//	layer3            bond0 bonded, with IP addresses, no VLANs
//	hybrid-bonded     bond0 bonded, with IP addresses and VLANs
//	hybrid            eth1 out of the bond for VLANs, bond0 (eth0) keeps the IPs
//	layer2-bonded     bond0 bonded, VLANs only
//	layer2-individual eth0 and eth1 out of the bond, VLANs only
func (w *world) networkType(d *device) metalv1.PortNetworkType {
	allBonded := !slices.ContainsFunc(w.members(d), func(p *port) bool { return !p.bonded })
	switch {
	case d.layer3 && allBonded && len(w.bond0(d).vlans) > 0:
		return metalv1.PORTNETWORKTYPE_HYBRID_BONDED
	case d.layer3 && allBonded:
		return metalv1.PORTNETWORKTYPE_LAYER3
	case d.layer3:
		return metalv1.PORTNETWORKTYPE_HYBRID
	case allBonded:
		return metalv1.PORTNETWORKTYPE_LAYER2_BONDED
	default:
		return metalv1.PORTNETWORKTYPE_LAYER2_INDIVIDUAL
	}
}

// checkNetworkChangeable refuses network changes the platform refuses: on a
// device whose network is frozen, or that is not active.
func checkNetworkChangeable(d *device) error {
	if d.networkFrozen {
		return fmt.Errorf("the network of device %s is frozen", d.hostname)
	}
	if d.state != metalv1.DEVICESTATE_ACTIVE {
		return fmt.Errorf("device %s is %s: its network can only change once it is active", d.hostname, d.state)
	}
	return nil
}

// checkCarriesVLANs refuses VLANs on a port that cannot carry them: an eth
// port inside the bond (it is Layer 3 or bonded Layer 2 through bond0), or a
// bond0 without members.
func (w *world) checkCarriesVLANs(d *device, p *port) error {
	if p.isBond() {
		if !slices.ContainsFunc(w.members(d), func(m *port) bool { return m.bonded }) {
			return errors.New("bond0 has no bonded ports: assign VLANs to eth0 or eth1")
		}
		return nil
	}
	if p.bonded {
		return fmt.Errorf("port %s is part of bond0 (network type %s): disbond it before assigning VLANs", p.name, w.networkType(d))
	}
	return nil
}

// checkNative refuses a native VLAN where the platform does: on bond0 while
// it carries Layer 3 (hybrid bonded mode only takes tagged VLANs).
func checkNative(d *device, p *port) error {
	if p.isBond() && d.layer3 {
		return errors.New("a native VLAN is not supported on bond0 while it carries Layer 3 (hybrid bonded)")
	}
	return nil
}

func (p *port) assign(vlanID string) {
	if !slices.Contains(p.vlans, vlanID) {
		p.vlans = append(p.vlans, vlanID)
	}
}

func (p *port) unassign(vlanID string) {
	p.vlans = slices.DeleteFunc(p.vlans, func(id string) bool { return id == vlanID })
	if p.native == vlanID {
		p.native = ""
	}
}

// vlanRef renders a VLAN of a port: in full when included, else as a bare
// reference, like the API.
func (w *world) vlanRef(id string, expand bool) metalv1.VirtualNetwork {
	if expand {
		return w.apiVirtualNetwork(w.vlans[id])
	}
	return metalv1.VirtualNetwork{Href: metalv1.PtrString(href("virtual-networks", id))}
}

func (w *world) apiPort(p *port, inc includes) metalv1.Port {
	d := w.devices[p.deviceID]
	out := metalv1.Port{
		Id:                        &p.id,
		Href:                      metalv1.PtrString(href("ports", p.id)),
		Name:                      &p.name,
		Type:                      metalv1.PORTTYPE_NETWORK_PORT.Ptr(),
		NetworkType:               w.networkType(d).Ptr(),
		DisbondOperationSupported: metalv1.PtrBool(true),
		Data:                      &metalv1.PortData{Bonded: metalv1.PtrBool(p.bonded)},
		VirtualNetworks: render(p.vlans, func(id string) metalv1.VirtualNetwork {
			return w.vlanRef(id, inc["virtual_networks"])
		}),
	}
	if p.isBond() {
		out.Type = metalv1.PORTTYPE_NETWORK_BOND_PORT.Ptr()
		out.Data.Bonded = metalv1.PtrBool(slices.ContainsFunc(w.members(d), func(m *port) bool { return m.bonded }))
	} else {
		bond0 := w.bond0(d)
		out.Data.Mac = &p.mac
		out.Bond = &metalv1.BondPortData{Id: &bond0.id, Name: &bond0.name}
	}
	if p.native != "" {
		native := w.vlanRef(p.native, inc["native_virtual_network"])
		out.NativeVirtualNetwork = &native
	}
	return out
}

// GET /ports/{id}[?include=]
func (s *Server) getPort(r *request) (reply, error) {
	p, err := find(r, s.world.ports, "id")
	if err != nil {
		return reply{}, err
	}
	return ok(s.world.apiPort(p, includesOf(r.Request)))
}

// portActionFunc changes a port of an active device, or says why it may not.
// Repeating an action whose effect is in place changes nothing and succeeds,
// as on the platform.
type portActionFunc func(w *world, d *device, p *port, r *request) error

// portAction serves a port action, answering with the changed port.
func (s *Server) portAction(act portActionFunc) handler {
	return func(r *request) (reply, error) {
		p, err := find(r, s.world.ports, "id")
		if err != nil {
			return reply{}, err
		}
		d := s.world.devices[p.deviceID]
		if err := checkNetworkChangeable(d); err != nil {
			return reply{}, unprocessable(err)
		}
		if err := act(s.world, d, p, r); err != nil {
			if apiErr, ok := errors.AsType[*apiError](err); ok {
				return reply{}, apiErr
			}
			return reply{}, unprocessable(err)
		}
		d.updated = r.now
		return ok(s.world.apiPort(p, includesOf(r.Request)))
	}
}

// vnidOf reads the {"vnid"} body of assign, unassign and convert/layer-2;
// required tells whether it must be present.
func vnidOf(r *request, required bool) (string, error) {
	if r.ContentLength == 0 && !required {
		return "", nil
	}
	var in metalv1.PortAssignInput
	if err := decode(r.Request, &in); err != nil {
		return "", err
	}
	if required && in.GetVnid() == "" {
		return "", errors.New("vnid is required")
	}
	return in.GetVnid(), nil
}

// POST /ports/{id}/assign {"vnid"}
func assignVLAN(w *world, d *device, p *port, r *request) error {
	vnid, err := vnidOf(r, true)
	if err != nil {
		return err
	}
	vn, err := w.resolveVLAN(d, vnid)
	if err != nil {
		return err
	}
	if err := w.checkCarriesVLANs(d, p); err != nil {
		return err
	}
	p.assign(vn.id)
	return nil
}

// POST /ports/{id}/unassign {"vnid"}
func unassignVLAN(w *world, d *device, p *port, r *request) error {
	vnid, err := vnidOf(r, true)
	if err != nil {
		return err
	}
	vn, err := w.resolveVLAN(d, vnid)
	if err != nil {
		return err
	}
	p.unassign(vn.id)
	return nil
}

// POST /ports/{id}/convert/layer-2 [{"vnid"}]: bond0 drops its IP
// addresses, and takes the VLAN if one is given.
func convertLayer2(w *world, d *device, p *port, r *request) error {
	if !p.isBond() {
		return fmt.Errorf("only bond ports can be converted; %s is not one", p.name)
	}
	vnid, err := vnidOf(r, false)
	if err != nil {
		return err
	}
	var vn *virtualNetwork
	if vnid != "" {
		if vn, err = w.resolveVLAN(d, vnid); err != nil {
			return err
		}
	}
	if d.layer3 && slices.ContainsFunc(w.members(d), func(m *port) bool { return !m.bonded }) {
		return errors.New("bond the ports of bond0 before converting it to layer 2")
	}
	if vn != nil {
		if err := w.checkCarriesVLANs(d, p); err != nil {
			return err
		}
	}
	d.layer3 = false
	if vn != nil {
		p.assign(vn.id)
	}
	return nil
}

// POST /ports/{id}/convert/layer-3 [{"request_ips"}]: bond0 gets IP
// addresses back. The requested address kinds are not simulated: a converted
// device gets the addresses it was provisioned with.
func convertLayer3(w *world, d *device, p *port, r *request) error {
	if !p.isBond() {
		return fmt.Errorf("only bond ports can be converted; %s is not one", p.name)
	}
	if r.ContentLength != 0 {
		var in metalv1.PortConvertLayer3Input
		if err := decode(r.Request, &in); err != nil {
			return err
		}
	}
	if d.layer3 {
		return nil
	}
	for _, id := range d.ports {
		if len(w.ports[id].vlans) > 0 {
			return fmt.Errorf("VLANs must first be unassigned (%s has %d)", w.ports[id].name, len(w.ports[id].vlans))
		}
	}
	if slices.ContainsFunc(w.members(d), func(m *port) bool { return !m.bonded }) {
		return errors.New("bond the ports of bond0 before converting it to layer 3")
	}
	d.layer3 = true
	return nil
}

// bondTargets are the ports a bond or disbond request acts on: one eth port,
// or all of them when asked for bulk, when addressed through bond0, or while
// the device is Layer 2 (whose bond is all or nothing).
func (w *world) bondTargets(d *device, p *port, bulk bool) []*port {
	if bulk || p.isBond() || !d.layer3 {
		return w.members(d)
	}
	return []*port{p}
}

// POST /ports/{id}/bond[?bulk_enable=]
func bond(w *world, d *device, p *port, r *request) error {
	bulk, err := boolParam(r, "bulk_enable")
	if err != nil {
		return err
	}
	targets := w.bondTargets(d, p, bulk)
	for _, t := range targets {
		if !t.bonded && len(t.vlans) > 0 {
			return fmt.Errorf("unassign the VLANs of %s before bonding it", t.name)
		}
	}
	for _, t := range targets {
		t.bonded = true
	}
	return nil
}

// POST /ports/{id}/disbond[?bulk_disable=]
func disbond(w *world, d *device, p *port, r *request) error {
	bulk, err := boolParam(r, "bulk_disable")
	if err != nil {
		return err
	}
	targets := w.bondTargets(d, p, bulk)
	if d.layer3 && slices.ContainsFunc(targets, func(t *port) bool { return t.name == "eth0" }) {
		return errors.New("eth0 carries the Layer 3 addresses of bond0: convert bond0 to layer 2 first, or disbond eth1 only (hybrid)")
	}
	if !d.layer3 && len(w.bond0(d).vlans) > 0 {
		return errors.New("unassign the VLANs of bond0 before disbonding its ports")
	}
	for _, t := range targets {
		t.bonded = false
	}
	return nil
}

// POST /ports/{id}/native-vlan?vnid=
func assignNativeVLAN(w *world, d *device, p *port, r *request) error {
	vnid := r.URL.Query().Get("vnid")
	if vnid == "" {
		return errors.New("vnid is required")
	}
	vn, err := w.resolveVLAN(d, vnid)
	if err != nil {
		return err
	}
	if !slices.Contains(p.vlans, vn.id) {
		return fmt.Errorf("VLAN %d must be assigned to %s before it can be its native VLAN", vn.vxlan, p.name)
	}
	if err := checkNative(d, p); err != nil {
		return err
	}
	p.native = vn.id
	return nil
}

// DELETE /ports/{id}/native-vlan
func removeNativeVLAN(_ *world, _ *device, p *port, _ *request) error {
	p.native = ""
	return nil
}

func boolParam(r *request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errorf(http.StatusUnprocessableEntity, "%s must be true or false", name)
	}
	return b, nil
}
