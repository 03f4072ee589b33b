package metal

import (
	"context"
	"net/http"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

var opFindVrfByID = operation{name: "findVrfById"}

// GetVRF returns the VRF with the given ID, including its ip_ranges.
func (c *Client) GetVRF(ctx context.Context, id string) (*metalv1.Vrf, error) {
	return call(ctx, c, opFindVrfByID, func(ctx context.Context) (*metalv1.Vrf, *http.Response, error) {
		return c.api.VRFsApi.FindVrfById(ctx, id).Execute()
	})
}
