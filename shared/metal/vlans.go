package metal

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

var (
	opFindVirtualNetworks = operation{name: "findVirtualNetworks"}
	opGetVirtualNetwork   = operation{name: "getVirtualNetwork"}
)

// ListVirtualNetworks returns the project's VLANs, only those in metro unless
// it is empty. The API answers this list in one page.
func (c *Client) ListVirtualNetworks(ctx context.Context, metro string) ([]metalv1.VirtualNetwork, error) {
	if err := c.requireProject(); err != nil {
		return nil, err
	}
	list, err := call(ctx, c, opFindVirtualNetworks, func(ctx context.Context) (*metalv1.VirtualNetworkList, *http.Response, error) {
		req := c.api.VLANsApi.FindVirtualNetworks(ctx, c.projectID)
		if metro != "" {
			req = req.Metro(metro)
		}
		return req.Execute()
	})
	if err != nil {
		return nil, err
	}
	return list.GetVirtualNetworks(), nil
}

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
