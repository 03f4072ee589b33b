package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	"github.com/google/uuid"
)

// publicBlock is where the simulator's public IPv4 addresses come from: a
// documentation range (RFC 5737), so nothing the simulator hands out is
// routable. Each metro of the catalogue owns one /28 of it, in catalogue
// order, so an address tells its metro and two metros never share one.
var publicBlock = netip.MustParsePrefix("198.51.100.0/24")

const publicMetroBits = 28

// metroPublicBlock is the /28 of publicBlock that a metro's addresses come
// from.
func metroPublicBlock(code string) netip.Prefix {
	i := slices.IndexFunc(metros, func(m metro) bool { return m.code == code })
	a := publicBlock.Addr().As4()
	a[3] = byte(i << (32 - publicMetroBits))
	return netip.PrefixFrom(netip.AddrFrom4(a), publicMetroBits)
}

// publicIP is a public IPv4 reservation of one address (a /32) in a metro.
type publicIP struct {
	record
	metro      string
	addr       netip.Addr
	tags       []string
	details    string
	customdata map[string]any
	// assignment is the address's assignment to a device; a /32 is
	// routed to one device at a time. Nil while unassigned.
	assignment *ipAssignment
}

// ipAssignment routes a reserved address to a device.
type ipAssignment struct {
	id       string
	deviceID string
	created  time.Time
}

// addPublicIP gives res the first free address of its metro's block and
// stores it.
func (w *world) addPublicIP(res *publicIP, now time.Time) error {
	block := metroPublicBlock(res.metro)
	taken := map[netip.Addr]bool{}
	for _, other := range w.publicIPs {
		taken[other.addr] = true
	}
	for a := block.Addr(); block.Contains(a); a = a.Next() {
		if !taken[a] {
			res.addr = a
			return store(w, w.publicIPs, res, now)
		}
	}
	return fmt.Errorf("no public IPv4 address is left in metro %s (the simulator has %s for it)", res.metro, block)
}

func apiPublicIP(res *publicIP) metalv1.IPReservation {
	m := apiMetro(res.metro)
	out := metalv1.IPReservation{
		Id:            &res.id,
		Href:          metalv1.PtrString(href("ips", res.id)),
		Type:          metalv1.IPRESERVATIONTYPE_PUBLIC_IPV4,
		Address:       metalv1.PtrString(res.addr.String()),
		Network:       metalv1.PtrString(res.addr.String()),
		Gateway:       metalv1.PtrString(res.addr.String()),
		Cidr:          metalv1.PtrInt32(32),
		AddressFamily: metalv1.PtrInt32(4),
		Netmask:       metalv1.PtrString("255.255.255.255"),
		Public:        metalv1.PtrBool(true),
		Management:    metalv1.PtrBool(false),
		Manageable:    metalv1.PtrBool(true),
		GlobalIp:      metalv1.PtrBool(false),
		Addon:         metalv1.PtrBool(true),
		Bill:          metalv1.PtrBool(true),
		Enabled:       metalv1.PtrBool(true),
		Available:     metalv1.PtrString(res.addr.String() + "/32"),
		State:         metalv1.PtrString("created"),
		Assignments:   []metalv1.IPAssignment{},
		Project:       projectRef(res.projectID),
		Metro:         &metalv1.IPReservationMetro{Id: m.Id, Code: m.Code, Name: m.Name, Country: m.Country},
		Tags:          nonNil(res.tags),
		Customdata:    res.customdata,
		CreatedAt:     &res.created,
	}
	if res.details != "" {
		out.Details = &res.details
	}
	if res.assignment != nil {
		out.Assignments = []metalv1.IPAssignment{apiAssignment(res)}
	}
	return out
}

// apiAssignment renders the assignment of res the way the API answers for
// an elastic address: public, not a management address of the device.
func apiAssignment(res *publicIP) metalv1.IPAssignment {
	a := res.assignment
	return metalv1.IPAssignment{
		Id:            &a.id,
		Href:          metalv1.PtrString(href("ips", a.id)),
		Address:       metalv1.PtrString(res.addr.String()),
		Network:       metalv1.PtrString(res.addr.String()),
		Gateway:       metalv1.PtrString(res.addr.String()),
		Cidr:          metalv1.PtrInt32(32),
		Netmask:       metalv1.PtrString("255.255.255.255"),
		AddressFamily: metalv1.PtrInt32(4),
		Public:        metalv1.PtrBool(true),
		Management:    metalv1.PtrBool(false),
		Manageable:    metalv1.PtrBool(true),
		Enabled:       metalv1.PtrBool(true),
		AssignedTo:    ref("devices", a.deviceID),
		ParentBlock:   &metalv1.ParentBlock{Network: metalv1.PtrString(res.addr.String()), Cidr: metalv1.PtrInt32(32), Href: metalv1.PtrString(href("ips", res.id))},
		CreatedAt:     &a.created,
	}
}

// assignedTo is the rendering of every address assigned to the device.
func (w *world) assignedTo(deviceID string) []metalv1.IPAssignment {
	var out []metalv1.IPAssignment
	for _, res := range sorted(w.publicIPs, func(res *publicIP) bool {
		return res.assignment != nil && res.assignment.deviceID == deviceID
	}) {
		out = append(out, apiAssignment(res))
	}
	return out
}

// POST /devices/{id}/ips {"address"}: routes a reserved public address of
// the device's project and metro to the device. An address already routed
// (to this device or another) is refused: it has to be unassigned first.
func (s *Server) createIPAssignment(r *request) (reply, error) {
	d, err := find(r, s.world.devices, "id")
	if err != nil {
		return reply{}, err
	}
	var in metalv1.IPAssignmentInput
	if err := decode(r.Request, &in); err != nil {
		return reply{}, err
	}
	addr, err := netip.ParseAddr(strings.TrimSuffix(in.Address, "/32"))
	if err != nil {
		return reply{}, errorf(http.StatusUnprocessableEntity, "address %q is not an IPv4 address or /32", in.Address)
	}
	if d.state == metalv1.DEVICESTATE_DEPROVISIONING {
		return reply{}, errorf(http.StatusUnprocessableEntity, "device %s is being deprovisioned", d.id)
	}
	reserved := sorted(s.world.publicIPs, func(res *publicIP) bool { return res.projectID == d.projectID && res.addr == addr })
	if len(reserved) == 0 {
		return reply{}, errorf(http.StatusUnprocessableEntity, "address %s is not reserved in the device's project", addr)
	}
	res := reserved[0]
	switch {
	case res.metro != d.metro:
		return reply{}, errorf(http.StatusUnprocessableEntity, "address %s is reserved in metro %s, the device is in metro %s", addr, res.metro, d.metro)
	case res.assignment != nil:
		return reply{}, errorf(http.StatusUnprocessableEntity, "address %s is already assigned to device %s", addr, res.assignment.deviceID)
	}
	res.assignment = &ipAssignment{id: uuid.NewString(), deviceID: d.id, created: r.now}
	return created(apiAssignment(res))
}

// createPublicIP serves POST /projects/{id}/ips for type public_ipv4. Only
// single addresses are simulated, and only by metro.
func (s *Server) createPublicIP(r *request, projectID string, body []byte) (reply, error) {
	var in metalv1.IPReservationRequestInput
	if err := json.Unmarshal(body, &in); err != nil {
		return reply{}, errorf(http.StatusUnprocessableEntity, "invalid request: %v", err)
	}
	if in.Quantity != 1 {
		return reply{}, errorf(http.StatusUnprocessableEntity, "quantity %d is not supported by the simulator, only 1", in.Quantity)
	}
	if in.Facility != nil {
		return reply{}, errorf(http.StatusUnprocessableEntity, "the simulator reserves public addresses by metro, not by facility (got facility %q)", *in.Facility)
	}
	metro := strings.ToLower(in.GetMetro())
	if metro == "" {
		return reply{}, errorf(http.StatusUnprocessableEntity, "metro is required for a public_ipv4 reservation")
	}
	if err := checkMetro(metro); err != nil {
		return reply{}, unprocessable(err)
	}
	res := &publicIP{
		record:     record{projectID: projectID},
		metro:      metro,
		tags:       in.Tags,
		customdata: in.Customdata,
	}
	if in.Details != nil {
		res.details = *in.Details
	}
	if err := s.world.addPublicIP(res, r.now); err != nil {
		return reply{}, unprocessable(err)
	}
	return created(apiPublicIP(res))
}

// ipReservationItem is one element of a project's IP reservation list: a
// public or a VRF reservation, rendered as the API's model of its kind.
type ipReservationItem struct {
	seq    int64
	public *publicIP
	vrf    *reservation
}

// GET /projects/{id}/ips?types=public_ipv4,vrf
func (s *Server) listIPReservations(r *request) (reply, error) {
	p, err := find(r, s.world.projects, "id")
	if err != nil {
		return reply{}, err
	}
	types := map[metalv1.FindIPReservationsTypesParameterInner]bool{}
	for _, v := range r.URL.Query()["types"] {
		for t := range strings.SplitSeq(v, ",") {
			types[metalv1.FindIPReservationsTypesParameterInner(strings.TrimSpace(t))] = true
		}
	}
	wanted := func(t metalv1.FindIPReservationsTypesParameterInner) bool { return len(types) == 0 || types[t] }

	var items []ipReservationItem
	if wanted(metalv1.FINDIPRESERVATIONSTYPESPARAMETERINNER_PUBLIC_IPV4) {
		for _, res := range sorted(s.world.publicIPs, inProject[*publicIP](p.id)) {
			items = append(items, ipReservationItem{seq: res.seq, public: res})
		}
	}
	if wanted(metalv1.FINDIPRESERVATIONSTYPESPARAMETERINNER_VRF) {
		for _, res := range sorted(s.world.reservations, inProject[*reservation](p.id)) {
			items = append(items, ipReservationItem{seq: res.seq, vrf: res})
		}
	}
	slices.SortFunc(items, func(a, b ipReservationItem) int { return int(a.seq - b.seq) })
	page, meta, err := paginate(r.Request, items)
	if err != nil {
		return reply{}, err
	}
	return ok(metalv1.IPReservationList{IpAddresses: render(page, s.apiIPReservationItem), Meta: meta})
}

func (s *Server) apiIPReservationItem(it ipReservationItem) metalv1.IPReservationListIpAddressesInner {
	if it.public != nil {
		res := apiPublicIP(it.public)
		return metalv1.IPReservationListIpAddressesInner{IPReservation: &res}
	}
	res := s.world.apiReservation(it.vrf)
	return metalv1.IPReservationListIpAddressesInner{VrfIpReservation: &res}
}

// GET /ips/{id}: a public or a VRF reservation.
func (s *Server) getIPAddress(r *request) (reply, error) {
	if res, err := find(r, s.world.publicIPs, "id"); err == nil {
		return ok(apiPublicIP(res))
	}
	res, err := find(r, s.world.reservations, "id")
	if err != nil {
		return reply{}, err
	}
	return ok(s.world.apiReservation(res))
}
