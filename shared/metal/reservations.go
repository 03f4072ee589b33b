package metal

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

var (
	opFindVrfIPReservations = operation{name: "findVrfIpReservations"}
	opFindVrfIPReservation  = operation{name: "findVrfIpReservation"}
	opRequestIPReservation  = operation{name: "requestIPReservation"}
	opDeleteIPAddress       = operation{name: "deleteIPAddress"}
)

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

// reservationPrefix is the subnet of a reservation, invalid when the API
// answer does not hold one.
func reservationPrefix(r metalv1.VrfIpReservation) netip.Prefix {
	addr, err := netip.ParseAddr(r.GetNetwork())
	if err != nil {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(addr, int(r.GetCidr()))
}
