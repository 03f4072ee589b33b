package metal

import (
	"context"
	"net/http"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

var (
	opFindVrfs    = operation{name: "findVrfs"}
	opFindVrfByID = operation{name: "findVrfById"}
)

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

// GetVRF returns the VRF with the given ID, including its ip_ranges.
func (c *Client) GetVRF(ctx context.Context, id string) (*metalv1.Vrf, error) {
	return call(ctx, c, opFindVrfByID, func(ctx context.Context) (*metalv1.Vrf, *http.Response, error) {
		return c.api.VRFsApi.FindVrfById(ctx, id).Execute()
	})
}
