package metal

import (
	"context"
	"errors"
	"net/http"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

var (
	// Creating a batch is not safe to repeat: a second batch is a second
	// job (and is refused while the first is in progress).
	opCreatePortVlanAssignmentBatch = operation{name: "createPortVlanAssignmentBatch"}
	opFindPortVlanAssignmentBatches = operation{name: "findPortVlanAssignmentBatches"}
)

// VLANAssignment is one change of a VLAN assignment batch.
type VLANAssignment struct {
	// VLAN is the VLAN ID (vxlan) or the virtual network's UUID.
	VLAN string
	// Native makes the VLAN the port's native (untagged) VLAN.
	Native bool
	// Unassign removes the VLAN instead of adding it.
	Unassign bool
}

// CreateVLANAssignmentBatch asks the platform to apply several VLAN changes
// to a port in one asynchronous job, which is how a port should be given its
// VLANs: one call instead of one per VLAN. Follow the batch in the port's
// list (ListVLANAssignmentBatches) until its state is completed or failed
// (with error_messages). A port refuses a new batch while one is in progress.
func (c *Client) CreateVLANAssignmentBatch(ctx context.Context, portID string, changes []VLANAssignment) (*metalv1.PortVlanAssignmentBatch, error) {
	if len(changes) == 0 {
		return nil, errors.New("metal: a VLAN assignment batch needs at least one change")
	}
	in := metalv1.PortVlanAssignmentBatchCreateInput{
		VlanAssignments: make([]metalv1.PortVlanAssignmentBatchCreateInputVlanAssignmentsInner, len(changes)),
	}
	for i, ch := range changes {
		state := metalv1.PORTVLANASSIGNMENTBATCHVLANASSIGNMENTSINNERSTATE_ASSIGNED
		if ch.Unassign {
			state = metalv1.PORTVLANASSIGNMENTBATCHVLANASSIGNMENTSINNERSTATE_UNASSIGNED
		}
		in.VlanAssignments[i] = metalv1.PortVlanAssignmentBatchCreateInputVlanAssignmentsInner{
			Vlan:   metalv1.PtrString(ch.VLAN),
			State:  &state,
			Native: metalv1.PtrBool(ch.Native),
		}
	}
	return call(ctx, c, opCreatePortVlanAssignmentBatch, func(ctx context.Context) (*metalv1.PortVlanAssignmentBatch, *http.Response, error) {
		return c.api.PortsApi.CreatePortVlanAssignmentBatch(ctx, portID).PortVlanAssignmentBatchCreateInput(in).Execute()
	})
}

// ListVLANAssignmentBatches returns the batches created for a port. The API
// answers this list in one page.
func (c *Client) ListVLANAssignmentBatches(ctx context.Context, portID string) ([]metalv1.PortVlanAssignmentBatch, error) {
	list, err := call(ctx, c, opFindPortVlanAssignmentBatches, func(ctx context.Context) (*metalv1.PortVlanAssignmentBatchList, *http.Response, error) {
		return c.api.PortsApi.FindPortVlanAssignmentBatches(ctx, portID).Execute()
	})
	if err != nil {
		return nil, err
	}
	return list.GetBatches(), nil
}
