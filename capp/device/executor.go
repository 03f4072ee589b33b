package device

import (
	"context"
	"fmt"
	"strings"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// Create creates the device. Only a machine that never asked for one
// calls it (the controller records the request first): any other looks
// for its device by tag instead (Find).
func (x Executor) Create(ctx context.Context, req metal.DeviceRequest) (*Device, error) {
	d, err := x.API.CreateDevice(ctx, req)
	if err != nil {
		return nil, err
	}
	return fromAPI(d), nil
}

// Run carries out a port or delete step on device d.
func (x Executor) Run(ctx context.Context, step Step, d *Device) error {
	switch step.Action {
	case Disbond:
		_, err := x.API.DisbondPort(ctx, d.Ports[step.Port].ID, false)
		return err
	case AssignVLANs:
		changes := make([]metal.VLANAssignment, len(step.VLANs))
		for i, v := range step.VLANs {
			changes[i] = metal.VLANAssignment{VLAN: v.ID}
		}
		_, err := x.API.CreateVLANAssignmentBatch(ctx, d.Ports[step.Port].ID, changes)
		return err
	case Delete:
		return x.API.DeleteDevice(ctx, d.ID)
	}
	return fmt.Errorf("device: %s is not a step to run", step.Action)
}

// Events returns the device's events as plain types.
func (x Executor) Events(ctx context.Context, id string) ([]Event, error) {
	events, err := x.API.DeviceEvents(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]Event, len(events))
	for i, e := range events {
		out[i] = Event{State: e.GetState(), Message: e.GetBody(), At: e.GetCreatedAt()}
	}
	return out, nil
}

// NextAvailable is the hardware reservation value that lets the platform pick
// any free reservation of the project.
const NextAvailable = "next-available"

// ReservationError: none of the hardware reservations asked for can take the
// device.
type ReservationError struct {
	// Asked is the preference list, in order.
	Asked []string
	// Why says, for each reservation, why it cannot be used.
	Why []string
}

func (e *ReservationError) Error() string {
	return fmt.Sprintf("no hardware reservation of %q can take the device: %s", strings.Join(e.Asked, ","), strings.Join(e.Why, "; "))
}

// PickReservation returns the first reservation of a comma-separated
// preference list that can take a device now, by reading each one (so the
// choice never depends on parsing the platform's error messages). An empty
// list or next-available is returned as it is: the platform decides.
func (x Executor) PickReservation(ctx context.Context, list string) (string, error) {
	ids := splitList(list)
	if len(ids) == 0 {
		return "", nil
	}
	if len(ids) == 1 && ids[0] == NextAvailable {
		return NextAvailable, nil
	}
	rerr := &ReservationError{Asked: ids}
	for _, id := range ids {
		hr, err := x.API.GetHardwareReservation(ctx, id)
		switch {
		case metal.IsNotFound(err):
			rerr.Why = append(rerr.Why, id+" does not exist")
		case err != nil:
			return "", err
		case !hr.GetProvisionable():
			why := id + " is not provisionable"
			if dev := hr.GetDevice(); dev.GetId() != "" {
				why = id + " is taken by device " + dev.GetId()
			}
			rerr.Why = append(rerr.Why, why)
		default:
			return id, nil
		}
	}
	return "", rerr
}

func splitList(list string) []string {
	var out []string
	for item := range strings.SplitSeq(list, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
