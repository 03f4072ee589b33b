package metal_test

import (
	"context"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
)

func TestVLANAssignmentBatch(t *testing.T) {
	e := newEnv(t, envOptions{sim: sim.Options{BatchDelay: 4 * time.Second}})
	ctx := context.Background()
	d := e.device(t, "node")
	bond0 := portID(t, d, "bond0")

	b, err := e.client.CreateVLANAssignmentBatch(ctx, bond0, []metal.VLANAssignment{{VLAN: "1001"}, {VLAN: "1002"}})
	if err != nil {
		t.Fatal(err)
	}
	if b.GetState() != metalv1.PORTVLANASSIGNMENTBATCHSTATE_QUEUED || b.GetQuantity() != 2 {
		t.Fatalf("new batch = %s, quantity %d", b.GetState(), b.GetQuantity())
	}
	if va := b.GetVlanAssignments(); len(va) != 2 || va[0].GetVlan() != 1001 || va[0].GetState() != "assigned" {
		t.Errorf("vlan_assignments = %+v", va)
	}
	_, err = e.client.CreateVLANAssignmentBatch(ctx, bond0, []metal.VLANAssignment{{VLAN: "1003"}})
	wantUnprocessable(t, "a second batch while one is queued", err, "in progress")

	for _, step := range []struct {
		advance time.Duration
		want    metalv1.PortVlanAssignmentBatchState
	}{
		{2 * time.Second, metalv1.PORTVLANASSIGNMENTBATCHSTATE_IN_PROGRESS},
		{2 * time.Second, metalv1.PORTVLANASSIGNMENTBATCHSTATE_COMPLETED},
	} {
		e.clock.Advance(step.advance)
		got, err := e.client.GetVLANAssignmentBatch(ctx, bond0, b.GetId())
		if err != nil {
			t.Fatal(err)
		}
		if got.GetState() != step.want {
			t.Fatalf("batch after +%s is %s, want %s", step.advance, got.GetState(), step.want)
		}
	}
	p, err := e.client.GetPort(ctx, bond0)
	wantNetworkType(t, p, err, metalv1.PORTNETWORKTYPE_HYBRID_BONDED)
	if got := vlans(p); len(got) != 2 || got[0] != 1001 || got[1] != 1002 {
		t.Errorf("bond0 VLANs after the batch = %v, want [1001 1002]", got)
	}

	batches, err := e.client.ListVLANAssignmentBatches(ctx, bond0)
	if err != nil || len(batches) != 1 || batches[0].GetId() != b.GetId() {
		t.Errorf("ListVLANAssignmentBatches = %v, %v", batches, err)
	}
	if _, err := e.client.GetVLANAssignmentBatch(ctx, portID(t, d, "eth0"), b.GetId()); !metal.IsNotFound(err) {
		t.Errorf("a batch read through another port: %v, want not found", err)
	}
	if _, err := e.client.CreateVLANAssignmentBatch(ctx, bond0, nil); err == nil {
		t.Error("an empty batch was sent")
	}
}

func TestVLANAssignmentBatchFails(t *testing.T) {
	e := newEnv(t, envOptions{sim: sim.Options{BatchDelay: time.Second}})
	ctx := context.Background()
	d := e.device(t, "node")
	eth1 := portID(t, d, "eth1")

	_, err := e.client.CreateVLANAssignmentBatch(ctx, eth1, []metal.VLANAssignment{{VLAN: "1001"}})
	wantUnprocessable(t, "a batch for a bonded eth port", err, "disbond it before assigning VLANs")

	if _, err := e.client.DisbondPort(ctx, eth1, false); err != nil {
		t.Fatal(err)
	}
	b, err := e.client.CreateVLANAssignmentBatch(ctx, eth1, []metal.VLANAssignment{{VLAN: "1001", Native: true}, {VLAN: "1003"}})
	if err != nil {
		t.Fatal(err)
	}
	// The port goes back into the bond before the batch runs: it fails,
	// says why, and changes nothing.
	if _, err := e.client.BondPort(ctx, eth1, false); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	got, err := e.client.GetVLANAssignmentBatch(ctx, eth1, b.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != metalv1.PORTVLANASSIGNMENTBATCHSTATE_FAILED || len(got.GetErrorMessages()) != 1 {
		t.Fatalf("batch = %s %v, want failed with a reason", got.GetState(), got.GetErrorMessages())
	}
	if p, err := e.client.GetPort(ctx, eth1); err != nil || len(p.GetVirtualNetworks()) != 0 {
		t.Errorf("a failed batch changed the port: %v, %v", vlans(p), err)
	}
}

func TestFailBatches(t *testing.T) {
	e := newEnv(t, envOptions{sim: sim.Options{BatchDelay: time.Second}})
	ctx := context.Background()
	bond0 := portID(t, e.device(t, "node"), "bond0")
	e.sim.FailBatches(1, "switch port maintenance")

	failed, err := e.client.CreateVLANAssignmentBatch(ctx, bond0, []metal.VLANAssignment{{VLAN: "1001"}})
	if err != nil {
		t.Fatalf("the create call of a batch that fails later: %v", err)
	}
	e.clock.Advance(time.Second)
	got, err := e.client.GetVLANAssignmentBatch(ctx, bond0, failed.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != metalv1.PORTVLANASSIGNMENTBATCHSTATE_FAILED || len(got.GetErrorMessages()) != 1 || got.GetErrorMessages()[0] != "switch port maintenance" {
		t.Fatalf("batch = %s %v, want failed with the injected message", got.GetState(), got.GetErrorMessages())
	}
	if p, err := e.client.GetPort(ctx, bond0); err != nil || len(p.GetVirtualNetworks()) != 0 {
		t.Errorf("a failed batch changed the port: %v, %v", vlans(p), err)
	}

	next, err := e.client.CreateVLANAssignmentBatch(ctx, bond0, []metal.VLANAssignment{{VLAN: "1001"}})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	if got, err := e.client.GetVLANAssignmentBatch(ctx, bond0, next.GetId()); err != nil || got.GetState() != metalv1.PORTVLANASSIGNMENTBATCHSTATE_COMPLETED {
		t.Errorf("the batch after the injected failure = %s, %v; want completed", got.GetState(), err)
	}
}
