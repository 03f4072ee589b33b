package metal

// The calls of this file are Metal API operations the providers never make,
// so the package does not export them to production: the tests make them,
// to set the simulator's platform up and read it back (ports, gateways,
// VLANs), and to exercise the client's mechanisms through them (retries of
// port actions that are safe to repeat, pagination, a create not repeated
// blindly and made safe by a lookup first).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// Len is how many Secrets' clients (and so tokens) the cache holds.
func (c *ClientCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.secrets)
}

// IsRateLimited reports whether the API was still rate limiting the call when
// the client gave up.
func IsRateLimited(err error) bool { return errors.Is(err, ErrRateLimited) }

// EnsureDevice returns the project's device tagged req.Tag, creating it when
// there is none. A create is never retried blindly (its outcome is unknown
// after a server error); calling EnsureDevice again is the safe retry. More
// than one device with the tag is an error: something else created one.
func (c *Client) EnsureDevice(ctx context.Context, req DeviceRequest) (*metalv1.Device, error) {
	if err := c.requireProject(); err != nil {
		return nil, err
	}
	if req.Tag == "" {
		return nil, errors.New("metal: a device request needs an identifying tag")
	}
	existing, err := c.ListDevices(ctx, DeviceFilter{Tag: req.Tag})
	if err != nil {
		return nil, err
	}
	switch len(existing) {
	case 0:
	case 1:
		return &existing[0], nil
	default:
		ids := make([]string, len(existing))
		for i := range existing {
			ids[i] = existing[i].GetId()
		}
		return nil, fmt.Errorf("metal: %d devices carry tag %q (%v); refusing to create another", len(existing), req.Tag, ids)
	}
	return c.CreateDevice(ctx, req)
}

var opFindPortVlanAssignmentBatch = operation{name: "findPortVlanAssignmentBatchByPortIdAndBatchId"}

// GetVLANAssignmentBatch returns a batch of a port, with its state.
func (c *Client) GetVLANAssignmentBatch(ctx context.Context, portID, batchID string) (*metalv1.PortVlanAssignmentBatch, error) {
	return call(ctx, c, opFindPortVlanAssignmentBatch, func(ctx context.Context) (*metalv1.PortVlanAssignmentBatch, *http.Response, error) {
		return c.api.PortsApi.FindPortVlanAssignmentBatchByPortIdAndBatchId(ctx, portID, batchID).Execute()
	})
}

var (
	opFindMetalGatewaysByProject = operation{name: "findMetalGatewaysByProject"}
	opFindMetalGatewayByID       = operation{name: "findMetalGatewayById"}
)

// gatewayIncludes expands a Metal Gateway's references. The SDK decodes a
// gateway through a oneOf of MetalGateway and VrfMetalGateway that only
// resolves when the nested reservation is complete (with its type and VRF),
// so every gateway request must ask for these.
var gatewayIncludes = []string{"ip_reservation", "virtual_network", "vrf"}

// ListMetalGateways returns the project's VRF Metal Gateways, only those of
// the VRF vrfID unless it is empty. Gateways serving non-VRF reservations are
// skipped: they serve no VRF subnet.
func (c *Client) ListMetalGateways(ctx context.Context, vrfID string) ([]metalv1.VrfMetalGateway, error) {
	if err := c.requireProject(); err != nil {
		return nil, err
	}
	all, err := listAll(ctx, c, opFindMetalGatewaysByProject,
		func(ctx context.Context, page, perPage int32) (*metalv1.MetalGatewayList, *http.Response, error) {
			return c.api.MetalGatewaysApi.FindMetalGatewaysByProject(ctx, c.projectID).
				Include(gatewayIncludes).Page(page).PerPage(perPage).Execute()
		},
		(*metalv1.MetalGatewayList).GetMetalGateways)
	if err != nil {
		return nil, err
	}
	var gateways []metalv1.VrfMetalGateway
	for _, g := range all {
		if g.VrfMetalGateway != nil && (vrfID == "" || g.VrfMetalGateway.Vrf.GetId() == vrfID) {
			gateways = append(gateways, *g.VrfMetalGateway)
		}
	}
	return gateways, nil
}

// GetMetalGateway returns a VRF Metal Gateway with its reservation, VLAN and
// VRF. A gateway that is not a VRF gateway is an error.
func (c *Client) GetMetalGateway(ctx context.Context, id string) (*metalv1.VrfMetalGateway, error) {
	g, err := call(ctx, c, opFindMetalGatewayByID, func(ctx context.Context) (*metalv1.FindMetalGatewayById200Response, *http.Response, error) {
		return c.api.MetalGatewaysApi.FindMetalGatewayById(ctx, id).Include(gatewayIncludes).Execute()
	})
	if err != nil {
		return nil, err
	}
	if g.VrfMetalGateway == nil {
		return nil, fmt.Errorf("metal: Metal Gateway %s is not a VRF gateway", id)
	}
	return g.VrfMetalGateway, nil
}

// Port actions, like DisbondPort, are marked safe to repeat: the platform
// treats repeating one whose effect is in place as a no-op.
var (
	opFindPortByID     = operation{name: "findPortById"}
	opAssignPort       = operation{name: "assignPort", safeToRepeat: true}
	opUnassignPort     = operation{name: "unassignPort", safeToRepeat: true}
	opConvertLayer2    = operation{name: "convertLayer2", safeToRepeat: true}
	opConvertLayer3    = operation{name: "convertLayer3", safeToRepeat: true}
	opBondPort         = operation{name: "bondPort", safeToRepeat: true}
	opAssignNativeVlan = operation{name: "assignNativeVlan", safeToRepeat: true}
	opDeleteNativeVlan = operation{name: "deleteNativeVlan"}
)

// layer3Addresses are the addresses a port converted to Layer 3 gets back:
// those of a freshly provisioned device.
var layer3Addresses = []metalv1.PortConvertLayer3InputRequestIpsInner{
	{AddressFamily: metalv1.PtrInt32(4), Public: metalv1.PtrBool(true)},
	{AddressFamily: metalv1.PtrInt32(4), Public: metalv1.PtrBool(false)},
	{AddressFamily: metalv1.PtrInt32(6), Public: metalv1.PtrBool(true)},
}

// GetPort returns a port (bond0, eth0, eth1 of a device) with its VLANs
// expanded.
func (c *Client) GetPort(ctx context.Context, id string) (*metalv1.Port, error) {
	return call(ctx, c, opFindPortByID, func(ctx context.Context) (*metalv1.Port, *http.Response, error) {
		return c.api.PortsApi.FindPortById(ctx, id).Include(portIncludes).Execute()
	})
}

// AssignPort attaches a VLAN to a port. vnid is the virtual network's UUID or
// its VLAN ID (vxlan). Assigning to bond0 of a Layer 3 device makes it
// hybrid-bonded; a port that is a member of a bond refuses VLANs (422).
func (c *Client) AssignPort(ctx context.Context, portID, vnid string) (*metalv1.Port, error) {
	return call(ctx, c, opAssignPort, func(ctx context.Context) (*metalv1.Port, *http.Response, error) {
		return c.api.PortsApi.AssignPort(ctx, portID).
			PortAssignInput(metalv1.PortAssignInput{Vnid: &vnid}).Include(portIncludes).Execute()
	})
}

// UnassignPort detaches a VLAN from a port.
func (c *Client) UnassignPort(ctx context.Context, portID, vnid string) (*metalv1.Port, error) {
	return call(ctx, c, opUnassignPort, func(ctx context.Context) (*metalv1.Port, *http.Response, error) {
		return c.api.PortsApi.UnassignPort(ctx, portID).
			PortAssignInput(metalv1.PortAssignInput{Vnid: &vnid}).Include(portIncludes).Execute()
	})
}

// ConvertLayer2 converts a bond port to Layer 2, removing its IP addresses,
// and attaches the VLAN vnid when it is not empty.
func (c *Client) ConvertLayer2(ctx context.Context, portID, vnid string) (*metalv1.Port, error) {
	return call(ctx, c, opConvertLayer2, func(ctx context.Context) (*metalv1.Port, *http.Response, error) {
		var in metalv1.PortAssignInput // required by the SDK even when empty
		if vnid != "" {
			in.Vnid = &vnid
		}
		return c.api.PortsApi.ConvertLayer2(ctx, portID).PortAssignInput(in).Execute()
	})
}

// ConvertLayer3 converts a bond port back to Layer 3 with public IPv4,
// private IPv4 and public IPv6 addresses. Its VLANs must be unassigned first.
func (c *Client) ConvertLayer3(ctx context.Context, portID string) (*metalv1.Port, error) {
	return call(ctx, c, opConvertLayer3, func(ctx context.Context) (*metalv1.Port, *http.Response, error) {
		return c.api.PortsApi.ConvertLayer3(ctx, portID).
			PortConvertLayer3Input(metalv1.PortConvertLayer3Input{RequestIps: layer3Addresses}).Execute()
	})
}

// BondPort puts a port back into its bond; with bulk, every port of the bond.
func (c *Client) BondPort(ctx context.Context, portID string, bulk bool) (*metalv1.Port, error) {
	return call(ctx, c, opBondPort, func(ctx context.Context) (*metalv1.Port, *http.Response, error) {
		return c.api.PortsApi.BondPort(ctx, portID).BulkEnable(bulk).Include(portIncludes).Execute()
	})
}

// AssignNativeVLAN makes an assigned VLAN the port's native (untagged) VLAN.
func (c *Client) AssignNativeVLAN(ctx context.Context, portID, vnid string) (*metalv1.Port, error) {
	return call(ctx, c, opAssignNativeVlan, func(ctx context.Context) (*metalv1.Port, *http.Response, error) {
		return c.api.PortsApi.AssignNativeVlan(ctx, portID).Vnid(vnid).Include(portIncludes).Execute()
	})
}

// RemoveNativeVLAN clears the port's native VLAN; the VLAN stays assigned.
func (c *Client) RemoveNativeVLAN(ctx context.Context, portID string) (*metalv1.Port, error) {
	return call(ctx, c, opDeleteNativeVlan, func(ctx context.Context) (*metalv1.Port, *http.Response, error) {
		return c.api.PortsApi.DeleteNativeVlan(ctx, portID).Include(portIncludes).Execute()
	})
}

var opFindVrfs = operation{name: "findVrfs"}

// ListVRFs returns the project's VRFs, only those in metro (a metro code such
// as "da") unless metro is empty. The API answers this list in one page.
func (c *Client) ListVRFs(ctx context.Context, metro string) ([]metalv1.Vrf, error) {
	if err := c.requireProject(); err != nil {
		return nil, err
	}
	list, err := call(ctx, c, opFindVrfs, func(ctx context.Context) (*metalv1.VrfList, *http.Response, error) {
		req := c.api.VRFsApi.FindVrfs(ctx, c.projectID)
		if metro != "" {
			req = req.Metro(metro)
		}
		return req.Execute()
	})
	if err != nil {
		return nil, err
	}
	return list.GetVrfs(), nil
}

var opFindVrfIPReservation = operation{name: "findVrfIpReservation"}

// VRFIPReservationRequest describes a VRF IP reservation: a subnet of one of
// the VRF's ip_ranges that a Metal Gateway can serve.
type VRFIPReservationRequest struct {
	VRFID string
	// Prefix is the subnet, e.g. 10.0.1.0/29: IPv4 /22 to /29, or IPv6 /64,
	// inside one of the VRF's ip_ranges and overlapping no other
	// reservation of the VRF.
	Prefix  netip.Prefix
	Tags    []string
	Details string
}

// GetVRFIPReservation returns one IP reservation of a VRF.
func (c *Client) GetVRFIPReservation(ctx context.Context, vrfID, id string) (*metalv1.VrfIpReservation, error) {
	return call(ctx, c, opFindVrfIPReservation, func(ctx context.Context) (*metalv1.VrfIpReservation, *http.Response, error) {
		return c.api.VRFsApi.FindVrfIpReservation(ctx, vrfID, id).Execute()
	})
}

// EnsureVRFIPReservation returns the VRF's reservation of exactly req.Prefix,
// creating it in the client's project if there is none. Looking it up first
// makes repeating the call (after a timeout, a restart, a lost answer) safe;
// the API itself refuses a second, overlapping reservation. A prefix the API
// refuses (outside the VRF's ranges, size out of bounds, overlapping another
// reservation) is an error for which IsUnprocessable holds, carrying the API's
// reason in ErrorMessages.
func (c *Client) EnsureVRFIPReservation(ctx context.Context, req VRFIPReservationRequest) (*metalv1.VrfIpReservation, error) {
	if err := c.requireProject(); err != nil {
		return nil, err
	}
	if !req.Prefix.IsValid() || req.Prefix != req.Prefix.Masked() {
		return nil, fmt.Errorf("metal: VRF IP reservation %s is not a subnet address", req.Prefix)
	}
	existing, err := c.ListVRFIPReservations(ctx, req.VRFID)
	if err != nil {
		return nil, err
	}
	for i := range existing {
		if reservationPrefix(existing[i]) == req.Prefix {
			return &existing[i], nil
		}
	}

	in := metalv1.VrfIpReservationCreateInput{
		Type:    string(metalv1.VRFIPRESERVATIONTYPE_VRF),
		VrfId:   req.VRFID,
		Network: req.Prefix.Addr().String(),
		Cidr:    int32(req.Prefix.Bits()),
		Tags:    req.Tags,
	}
	if req.Details != "" {
		in.Details = &req.Details
	}
	created, err := call(ctx, c, opRequestIPReservation, func(ctx context.Context) (*metalv1.RequestIPReservation201Response, *http.Response, error) {
		return c.api.IPAddressesApi.RequestIPReservation(ctx, c.projectID).
			RequestIPReservationRequest(metalv1.RequestIPReservationRequest{VrfIpReservationCreateInput: &in}).
			Execute()
	})
	if err != nil {
		return nil, err
	}
	if created.VrfIpReservation == nil {
		return nil, fmt.Errorf("metal %s: the answer is not a VRF IP reservation", opRequestIPReservation.name)
	}
	return created.VrfIpReservation, nil
}

// reservationPrefix is the subnet of a reservation, invalid when the API
// answer does not hold one.
func reservationPrefix(r metalv1.VrfIpReservation) netip.Prefix {
	addr, err := netip.ParseAddr(r.GetNetwork())
	if err != nil {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(addr, int(r.GetCidr()))
}

var opGetVirtualNetwork = operation{name: "getVirtualNetwork"}

// GetVirtualNetwork returns the VLAN with the given ID.
func (c *Client) GetVirtualNetwork(ctx context.Context, id string) (*metalv1.VirtualNetwork, error) {
	return call(ctx, c, opGetVirtualNetwork, func(ctx context.Context) (*metalv1.VirtualNetwork, *http.Response, error) {
		return c.api.VLANsApi.GetVirtualNetwork(ctx, id).Execute()
	})
}

// FindVirtualNetworkByVXLAN returns the project's VLAN with the given VLAN ID
// (vxlan) in metro, which identifies it: the API keeps vxlan unique per metro.
// The API cannot filter by vxlan, so the metro's VLANs are matched here. No
// match is an error for which IsNotFound holds.
func (c *Client) FindVirtualNetworkByVXLAN(ctx context.Context, metro string, vxlan int32) (*metalv1.VirtualNetwork, error) {
	if metro == "" {
		return nil, errors.New("metal: a VLAN is only identified by its vxlan within a metro")
	}
	vlans, err := c.ListVirtualNetworks(ctx, metro)
	if err != nil {
		return nil, err
	}
	for i := range vlans {
		if vlans[i].GetVxlan() == vxlan {
			return &vlans[i], nil
		}
	}
	return nil, fmt.Errorf("metal: VLAN %d in metro %q: %w", vxlan, metro, ErrNotFound)
}
