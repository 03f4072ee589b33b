package device

import (
	"cmp"
	"context"
	"slices"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// Endpoint is a cluster's reserved public address (CPEM mode) and the
// devices the platform routes it to.
type Endpoint struct {
	ReservationID string
	Address       string
	Project       string
	Tags          []string
	// AssignedTo are the IDs of the devices the address is routed to.
	AssignedTo []string
}

// EndpointAction is what a control-plane device needs of its cluster's
// reserved endpoint address.
type EndpointAction int

const (
	// AssignEndpoint routes the address to the device: no device has it.
	AssignEndpoint EndpointAction = iota
	// EndpointHere: the device has it.
	EndpointHere
	// EndpointElsewhere: another control-plane device has it, and the
	// cloud provider (CPEM) moves it to a healthy one when that fails. The
	// provider only routes an address nobody has, as upstream CAPP does.
	EndpointElsewhere
)

// PlanEndpoint decides what deviceID needs of the endpoint ep.
func PlanEndpoint(ep Endpoint, deviceID string) EndpointAction {
	switch {
	case len(ep.AssignedTo) == 0:
		return AssignEndpoint
	case slices.Contains(ep.AssignedTo, deviceID):
		return EndpointHere
	default:
		return EndpointElsewhere
	}
}

// ReadEndpoint reads the reservation id and where its address is routed,
// and proves it is the cluster owner's (by the endpoint tag, see Owned)
// before anything else is done with it: one that is not is a
// *NotOwnedError.
func (x Executor) ReadEndpoint(ctx context.Context, id string, owner Owner) (Endpoint, error) {
	res, err := x.API.GetIPReservation(ctx, id)
	if err != nil {
		return Endpoint{}, err
	}
	ep := EndpointOf(res)
	return ep, Owned("reservation", ep.ReservationID, ep.Project, ep.Tags, EndpointTagPrefix, owner)
}

// EndpointOf is a reservation as plain types.
func EndpointOf(res *metalv1.IPReservation) Endpoint {
	project := res.GetProject()
	ep := Endpoint{ReservationID: res.GetId(), Address: res.GetAddress(), Project: cmp.Or(project.GetId(), hrefID(project.GetHref())), Tags: res.GetTags()}
	for _, a := range res.GetAssignments() {
		ep.AssignedTo = append(ep.AssignedTo, hrefID(a.AssignedTo.GetHref()))
	}
	return ep
}

// AssignEndpoint routes the endpoint's address to the device.
func (x Executor) AssignEndpoint(ctx context.Context, ep Endpoint, deviceID string) error {
	_, err := x.API.AssignIPAddress(ctx, deviceID, ep.Address+"/32")
	return err
}
