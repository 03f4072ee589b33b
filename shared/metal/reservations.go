package metal

import (
	"context"
	"net/http"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

var (
	opFindVrfIPReservations = operation{name: "findVrfIpReservations"}
	opDeleteIPAddress       = operation{name: "deleteIPAddress"}
)

// ListVRFIPReservations returns the IP reservations of a VRF. The API answers
// this list in one page.
func (c *Client) ListVRFIPReservations(ctx context.Context, vrfID string) ([]metalv1.VrfIpReservation, error) {
	list, err := call(ctx, c, opFindVrfIPReservations, func(ctx context.Context) (*metalv1.VrfIpReservationList, *http.Response, error) {
		return c.api.VRFsApi.FindVrfIpReservations(ctx, vrfID).Execute()
	})
	if err != nil {
		return nil, err
	}
	return list.GetIpAddresses(), nil
}

// DeleteIPReservation deletes an IP reservation. A reservation that is
// already gone is not an error, so a retried or repeated delete succeeds.
func (c *Client) DeleteIPReservation(ctx context.Context, id string) error {
	err := callNoContent(ctx, c, opDeleteIPAddress, func(ctx context.Context) (*http.Response, error) {
		return c.api.IPAddressesApi.DeleteIPAddress(ctx, id).Execute()
	})
	if IsNotFound(err) {
		return nil
	}
	return err
}
