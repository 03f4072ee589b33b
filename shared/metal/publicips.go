package metal

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

var (
	opRequestIPReservation = operation{name: "requestIPReservation"}
	opFindIPReservations   = operation{name: "findIPReservations"}
	opFindIPAddressByID    = operation{name: "findIPAddressById"}
	opCreateIPAssignment   = operation{name: "createIPAssignment"}
)

// ReservePublicIPv4 reserves one public IPv4 address (a /32) in metro, in the
// client's project, tagged with tags. The create is not repeated on failure:
// a lost answer may still have reserved the address, so callers tag the
// reservation and look for the tag (ListPublicIPv4Reservations) before
// reserving again.
func (c *Client) ReservePublicIPv4(ctx context.Context, metro string, tags []string) (*metalv1.IPReservation, error) {
	if err := c.requireProject(); err != nil {
		return nil, err
	}
	if metro == "" {
		return nil, fmt.Errorf("metal: a public IPv4 reservation needs a metro")
	}
	in := metalv1.IPReservationRequestInput{
		Type:     string(metalv1.IPRESERVATIONTYPE_PUBLIC_IPV4),
		Quantity: 1,
		Metro:    &metro,
		Tags:     tags,
	}
	created, err := call(ctx, c, opRequestIPReservation, func(ctx context.Context) (*metalv1.RequestIPReservation201Response, *http.Response, error) {
		return c.api.IPAddressesApi.RequestIPReservation(ctx, c.projectID).
			RequestIPReservationRequest(metalv1.RequestIPReservationRequest{IPReservationRequestInput: &in}).
			Execute()
	})
	if err != nil {
		return nil, err
	}
	if created.IPReservation == nil {
		return nil, fmt.Errorf("metal %s: the answer is not a public IP reservation", opRequestIPReservation.name)
	}
	return created.IPReservation, nil
}

// ListPublicIPv4Reservations returns the public IPv4 reservations of the
// client's project that carry tag (all of them when tag is empty), every page
// of them. The API has no tag filter for reservations, so the tag is matched
// here.
func (c *Client) ListPublicIPv4Reservations(ctx context.Context, tag string) ([]metalv1.IPReservation, error) {
	if err := c.requireProject(); err != nil {
		return nil, err
	}
	all, err := listAll(ctx, c, opFindIPReservations,
		func(ctx context.Context, page, perPage int32) (*metalv1.IPReservationList, *http.Response, error) {
			return c.api.IPAddressesApi.FindIPReservations(ctx, c.projectID).
				Types([]metalv1.FindIPReservationsTypesParameterInner{metalv1.FINDIPRESERVATIONSTYPESPARAMETERINNER_PUBLIC_IPV4}).
				Page(page).PerPage(perPage).Execute()
		},
		(*metalv1.IPReservationList).GetIpAddresses)
	if err != nil {
		return nil, err
	}
	var out []metalv1.IPReservation
	for _, item := range all {
		r := item.IPReservation
		if r == nil || r.GetType() != metalv1.IPRESERVATIONTYPE_PUBLIC_IPV4 {
			continue
		}
		if tag == "" || slices.Contains(r.GetTags(), tag) {
			out = append(out, *r)
		}
	}
	return out, nil
}

// GetIPReservation returns a public IP reservation by ID. An ID that names
// something else (a VRF reservation, an assignment) is an error, not a
// reservation without fields.
func (c *Client) GetIPReservation(ctx context.Context, id string) (*metalv1.IPReservation, error) {
	got, err := call(ctx, c, opFindIPAddressByID, func(ctx context.Context) (*metalv1.FindIPAddressById200Response, *http.Response, error) {
		return c.api.IPAddressesApi.FindIPAddressById(ctx, id).Execute()
	})
	if err != nil {
		return nil, err
	}
	if got.IPReservation == nil {
		return nil, fmt.Errorf("metal %s: %s is not a public IP reservation", opFindIPAddressByID.name, id)
	}
	return got.IPReservation, nil
}

// AssignIPAddress routes address, a reserved public IPv4 address of the
// device's project and metro, to the device. The create is not repeated on
// failure: a lost answer may have assigned it, which the reservation's
// assignments show.
func (c *Client) AssignIPAddress(ctx context.Context, deviceID, address string) (*metalv1.IPAssignment, error) {
	return call(ctx, c, opCreateIPAssignment, func(ctx context.Context) (*metalv1.IPAssignment, *http.Response, error) {
		return c.api.DevicesApi.CreateIPAssignment(ctx, deviceID).
			IPAssignmentInput(metalv1.IPAssignmentInput{Address: address}).Execute()
	})
}
