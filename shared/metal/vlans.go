package metal

import (
	"context"
	"net/http"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

var opFindVirtualNetworks = operation{name: "findVirtualNetworks"}

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
