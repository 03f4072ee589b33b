package device

import (
	"cmp"
	"context"
	"slices"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// Endpoint is a cluster's reserved public address (CPEM mode) and the
// devices the platform routes it to.
type Endpoint struct {
	ReservationID string
	Address       string
	Project       string
	Metro         string
	Tags          []string
	CreatedAt     time.Time
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
	// EndpointElsewhere: another control-plane device has it (CPEM, when
	// a cluster runs it instead of the flavors' cloud controller manager,
	// moves it to a healthy one when that fails). The provider only routes
	// an address nobody has, as upstream CAPP does.
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
	ep := endpointOf(res)
	return ep, Owned("reservation", ep.ReservationID, ep.Project, ep.Tags, EndpointTagPrefix, owner)
}

// endpointOf is a reservation as plain types.
func endpointOf(res *metalv1.IPReservation) Endpoint {
	project := res.GetProject()
	ep := Endpoint{
		ReservationID: res.GetId(), Address: res.GetAddress(), Project: cmp.Or(project.GetId(), hrefID(project.GetHref())),
		Metro: res.Metro.GetCode(), Tags: res.GetTags(), CreatedAt: res.GetCreatedAt(),
	}
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

// ReservationPlan is what a cluster does with the reservations carrying
// its tag: keep one as its endpoint and release the others, or reserve one
// when there is none.
type ReservationPlan struct {
	Reserve bool
	Keep    Endpoint
	Release []Endpoint
}

// PlanReservation decides, from the reservations carrying the cluster's
// tag, which to keep: the one already the endpoint's host, else the
// oldest; the others (a reserve whose answer was lost and was asked again)
// are released, so the cluster never holds two.
func PlanReservation(tagged []Endpoint, host string) ReservationPlan {
	if len(tagged) == 0 {
		return ReservationPlan{Reserve: true}
	}
	sorted := slices.Clone(tagged)
	slices.SortStableFunc(sorted, func(a, b Endpoint) int { return a.CreatedAt.Compare(b.CreatedAt) })
	i := max(slices.IndexFunc(sorted, func(e Endpoint) bool { return host != "" && e.Address == host }), 0)
	keep := sorted[i]
	return ReservationPlan{Keep: keep, Release: slices.Delete(sorted, i, i+1)}
}

// FindEndpoints lists the project's public IPv4 reservations carrying tag.
func (x Executor) FindEndpoints(ctx context.Context, tag string) ([]Endpoint, error) {
	found, err := x.API.ListPublicIPv4Reservations(ctx, tag)
	if err != nil {
		return nil, err
	}
	out := make([]Endpoint, len(found))
	for i := range found {
		out[i] = endpointOf(&found[i])
	}
	return out, nil
}

// ReserveEndpoint reserves a public IPv4 address in metro, tagged.
func (x Executor) ReserveEndpoint(ctx context.Context, metro string, tags []string) (Endpoint, error) {
	res, err := x.API.ReservePublicIPv4(ctx, metro, tags)
	if err != nil {
		return Endpoint{}, err
	}
	return endpointOf(res), nil
}

// ReleaseEndpoint releases the reservation.
func (x Executor) ReleaseEndpoint(ctx context.Context, ep Endpoint) error {
	return x.API.DeleteIPReservation(ctx, ep.ReservationID)
}
