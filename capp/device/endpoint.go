package device

import (
	"context"
	"path"
	"slices"
)

// Endpoint is a cluster's reserved public address (CPEM mode) and the
// devices the platform routes it to.
type Endpoint struct {
	ReservationID string
	Address       string
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

// ReadEndpoint reads the reservation id and where its address is routed.
func (x Executor) ReadEndpoint(ctx context.Context, id string) (Endpoint, error) {
	res, err := x.API.GetIPReservation(ctx, id)
	if err != nil {
		return Endpoint{}, err
	}
	ep := Endpoint{ReservationID: res.GetId(), Address: res.GetAddress()}
	for _, a := range res.GetAssignments() {
		ep.AssignedTo = append(ep.AssignedTo, path.Base(a.AssignedTo.GetHref()))
	}
	return ep, nil
}

// AssignEndpoint routes the endpoint's address to the device.
func (x Executor) AssignEndpoint(ctx context.Context, ep Endpoint, deviceID string) error {
	_, err := x.API.AssignIPAddress(ctx, deviceID, ep.Address+"/32")
	return err
}
