package sim

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	"github.com/google/uuid"
)

// batch is a VLAN assignment batch: VLAN changes to one port, applied
// together and asynchronously.
type batch struct {
	record
	portID  string
	state   metalv1.PortVlanAssignmentBatchState
	updated time.Time
	changes []vlanChange
	errors  []string
	// failWith, when set, is the error the batch fails with when it
	// applies (FailBatches).
	failWith string
}

type vlanChange struct {
	id     string
	vlanID string
	vxlan  int32
	assign bool
	native bool
}

func (b *batch) pending() bool {
	return b.state == metalv1.PORTVLANASSIGNMENTBATCHSTATE_QUEUED || b.state == metalv1.PORTVLANASSIGNMENTBATCHSTATE_IN_PROGRESS
}

// checkChanges applies the rules of the port actions to a batch: VLANs can be
// assigned to p, a native VLAN is allowed there, and there is at most one.
func (w *world) checkChanges(d *device, p *port, changes []vlanChange) error {
	natives := 0
	for _, ch := range changes {
		if ch.assign {
			if err := w.checkCarriesVLANs(d, p); err != nil {
				return err
			}
		}
		if ch.native {
			if !ch.assign {
				return fmt.Errorf("VLAN %d: only an assigned VLAN can be native", ch.vxlan)
			}
			if err := checkNative(d, p); err != nil {
				return err
			}
			natives++
		}
	}
	if natives > 1 {
		return errors.New("a port has at most one native VLAN")
	}
	return nil
}

// advanceBatch moves b along queued -> in_progress -> completed (or failed),
// half the batch delay in each of the first two states. The changes are
// checked again when they apply, since the port may have changed in the
// meantime: a batch that no longer fits fails with the reason and changes
// nothing.
func (w *world) advanceBatch(b *batch, now time.Time, delay time.Duration) {
	if b.state == metalv1.PORTVLANASSIGNMENTBATCHSTATE_QUEUED {
		at := b.created.Add(delay / 2)
		if now.Before(at) {
			return
		}
		b.state, b.updated = metalv1.PORTVLANASSIGNMENTBATCHSTATE_IN_PROGRESS, at
	}
	if b.state != metalv1.PORTVLANASSIGNMENTBATCHSTATE_IN_PROGRESS {
		return
	}
	at := b.created.Add(delay)
	if now.Before(at) {
		return
	}
	b.updated = at
	p := w.ports[b.portID]
	d := w.devices[p.deviceID]
	err := checkNetworkChangeable(d)
	if err == nil {
		err = w.checkChanges(d, p, b.changes)
	}
	if err == nil && b.failWith != "" {
		err = errors.New(b.failWith)
	}
	if err != nil {
		b.state, b.errors = metalv1.PORTVLANASSIGNMENTBATCHSTATE_FAILED, []string{err.Error()}
		return
	}
	for _, ch := range b.changes {
		if !ch.assign {
			p.unassign(ch.vlanID)
			continue
		}
		p.assign(ch.vlanID)
		if ch.native {
			p.native = ch.vlanID
		}
	}
	b.state = metalv1.PORTVLANASSIGNMENTBATCHSTATE_COMPLETED
	d.updated = at
}

func apiBatch(b *batch) metalv1.PortVlanAssignmentBatch {
	return metalv1.PortVlanAssignmentBatch{
		Id:            &b.id,
		State:         &b.state,
		Quantity:      metalv1.PtrInt32(int32(len(b.changes))),
		Port:          &metalv1.Port{Id: &b.portID, Href: metalv1.PtrString(href("ports", b.portID))},
		Project:       ref("projects", b.projectID),
		ErrorMessages: nonNil(b.errors),
		VlanAssignments: render(b.changes, func(ch vlanChange) metalv1.PortVlanAssignmentBatchVlanAssignmentsInner {
			state := metalv1.PORTVLANASSIGNMENTBATCHVLANASSIGNMENTSINNERSTATE_ASSIGNED
			if !ch.assign {
				state = metalv1.PORTVLANASSIGNMENTBATCHVLANASSIGNMENTSINNERSTATE_UNASSIGNED
			}
			return metalv1.PortVlanAssignmentBatchVlanAssignmentsInner{Id: &ch.id, Vlan: &ch.vxlan, State: &state, Native: &ch.native}
		}),
		CreatedAt: &b.created,
		UpdatedAt: &b.updated,
	}
}

// POST /ports/{id}/vlan-assignments/batches {"vlan_assignments": [...]}
func (s *Server) createBatch(r *request) (reply, error) {
	p, err := find(r, s.world.ports, "id")
	if err != nil {
		return reply{}, err
	}
	d := s.world.devices[p.deviceID]
	if err := checkNetworkChangeable(d); err != nil {
		return reply{}, unprocessable(err)
	}
	for _, other := range s.world.batches {
		if other.portID == p.id && other.pending() {
			return reply{}, errorf(http.StatusUnprocessableEntity, "port %s already has VLAN assignment batch %s in progress", p.name, other.id)
		}
	}
	var in metalv1.PortVlanAssignmentBatchCreateInput
	if err := decode(r.Request, &in); err != nil {
		return reply{}, err
	}
	if len(in.VlanAssignments) == 0 {
		return reply{}, errorf(http.StatusUnprocessableEntity, "vlan_assignments must not be empty")
	}
	changes := make([]vlanChange, len(in.VlanAssignments))
	for i, a := range in.VlanAssignments {
		if a.State == nil {
			return reply{}, errorf(http.StatusUnprocessableEntity, "vlan_assignments[%d]: state is required", i)
		}
		vn, err := s.world.resolveVLAN(d, a.GetVlan())
		if err != nil {
			return reply{}, errorf(http.StatusUnprocessableEntity, "vlan_assignments[%d]: %v", i, err)
		}
		changes[i] = vlanChange{
			id:     uuid.NewString(),
			vlanID: vn.id,
			vxlan:  vn.vxlan,
			assign: *a.State == metalv1.PORTVLANASSIGNMENTBATCHVLANASSIGNMENTSINNERSTATE_ASSIGNED,
			native: a.GetNative(),
		}
	}
	if err := s.world.checkChanges(d, p, changes); err != nil {
		return reply{}, unprocessable(err)
	}
	b := &batch{
		record:  record{projectID: p.projectID},
		portID:  p.id,
		state:   metalv1.PORTVLANASSIGNMENTBATCHSTATE_QUEUED,
		updated: r.now,
		changes: changes,
	}
	if len(s.batchFaults) > 0 {
		b.failWith, s.batchFaults = s.batchFaults[0], s.batchFaults[1:]
	}
	if err := store(s.world, s.world.batches, b, r.now); err != nil {
		return reply{}, err
	}
	s.world.advanceBatch(b, r.now, s.batchDelay)
	return created(apiBatch(b))
}

// GET /ports/{id}/vlan-assignments/batches
func (s *Server) listBatches(r *request) (reply, error) {
	p, err := find(r, s.world.ports, "id")
	if err != nil {
		return reply{}, err
	}
	batches := sorted(s.world.batches, func(b *batch) bool { return b.portID == p.id })
	return ok(metalv1.PortVlanAssignmentBatchList{Batches: render(batches, apiBatch)})
}

// GET /ports/{id}/vlan-assignments/batches/{batch}
func (s *Server) getBatch(r *request) (reply, error) {
	p, err := find(r, s.world.ports, "id")
	if err != nil {
		return reply{}, err
	}
	b, err := find(r, s.world.batches, "batch")
	if err != nil || b.portID != p.id {
		return reply{}, errNotFound
	}
	return ok(apiBatch(b))
}
