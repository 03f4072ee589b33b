package metal

import (
	"context"
	"fmt"
	"net/http"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

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
