package metal

import (
	"context"
	"net/http"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// Port actions are POSTs, but the platform treats repeating one whose effect
// is in place as a no-op (assigning an assigned VLAN, bonding a bonded port),
// so they are marked safe to repeat and get the retries of idempotent calls.
var (
	opFindPortByID     = operation{name: "findPortById"}
	opAssignPort       = operation{name: "assignPort", safeToRepeat: true}
	opUnassignPort     = operation{name: "unassignPort", safeToRepeat: true}
	opConvertLayer2    = operation{name: "convertLayer2", safeToRepeat: true}
	opConvertLayer3    = operation{name: "convertLayer3", safeToRepeat: true}
	opBondPort         = operation{name: "bondPort", safeToRepeat: true}
	opDisbondPort      = operation{name: "disbondPort", safeToRepeat: true}
	opAssignNativeVlan = operation{name: "assignNativeVlan", safeToRepeat: true}
	opDeleteNativeVlan = operation{name: "deleteNativeVlan"}
)

var (
	// portIncludes expands a port's VLANs, which the API otherwise answers
	// as bare references.
	portIncludes = []string{"virtual_networks", "native_virtual_network"}
	// layer3Addresses are the addresses a port converted to Layer 3 gets
	// back: those of a freshly provisioned device.
	layer3Addresses = []metalv1.PortConvertLayer3InputRequestIpsInner{
		{AddressFamily: metalv1.PtrInt32(4), Public: metalv1.PtrBool(true)},
		{AddressFamily: metalv1.PtrInt32(4), Public: metalv1.PtrBool(false)},
		{AddressFamily: metalv1.PtrInt32(6), Public: metalv1.PtrBool(true)},
	}
)

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

// DisbondPort takes a port out of its bond; with bulk, every port of the
// bond. Taking eth1 out of a Layer 3 bond gives the hybrid (unbonded) mode.
func (c *Client) DisbondPort(ctx context.Context, portID string, bulk bool) (*metalv1.Port, error) {
	return call(ctx, c, opDisbondPort, func(ctx context.Context) (*metalv1.Port, *http.Response, error) {
		return c.api.PortsApi.DisbondPort(ctx, portID).BulkDisable(bulk).Include(portIncludes).Execute()
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
