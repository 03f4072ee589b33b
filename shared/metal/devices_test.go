package metal_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
)

func TestEnsureDeviceIsIdempotent(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	req := metal.DeviceRequest{
		Tag: "machine-uid-1", Hostname: "node-1", Plan: "m3.small.x86", Metro: "da",
		OperatingSystem: "ubuntu_24_04", Userdata: "#cloud-config\n", Tags: []string{"cluster:demo"},
		Customdata: map[string]any{"cluster": "demo"},
	}
	d, err := e.client.EnsureDevice(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if d.GetHostname() != "node-1" || d.GetUserdata() != "#cloud-config\n" || d.Plan.GetSlug() != "m3.small.x86" ||
		d.Metro.GetCode() != "da" || d.GetBillingCycle() != "hourly" {
		t.Errorf("device = %+v", d)
	}
	if tags := d.GetTags(); len(tags) != 2 || tags[1] != "machine-uid-1" {
		t.Errorf("tags = %v, want the request's tags and the identifying tag", tags)
	}
	if ports := d.GetNetworkPorts(); len(ports) != 3 {
		t.Errorf("device has %d ports, want bond0, eth0, eth1", len(ports))
	}
	if addrs := d.GetIpAddresses(); len(addrs) != 3 {
		t.Errorf("device has %d IP addresses, want 3", len(addrs))
	}

	again, err := e.client.EnsureDevice(ctx, req)
	if err != nil || again.GetId() != d.GetId() {
		t.Fatalf("second EnsureDevice = %s, %v; want %s", again.GetId(), err, d.GetId())
	}
	if n := e.sim.Calls(sim.OpCreateDevice); n != 1 {
		t.Errorf("createDevice called %d times, want 1", n)
	}

	got, err := e.client.GetDevice(ctx, d.GetId())
	if err != nil || got.GetId() != d.GetId() {
		t.Fatalf("GetDevice = %v, %v", got, err)
	}
	byHost, err := e.client.ListDevices(ctx, metal.DeviceFilter{Hostname: "node-1"})
	if err != nil || len(byHost) != 1 {
		t.Errorf("ListDevices(hostname) = %d devices, %v", len(byHost), err)
	}

	if err := e.client.DeleteDevice(ctx, d.GetId()); err != nil {
		t.Fatal(err)
	}
	if err := e.client.DeleteDevice(ctx, d.GetId()); err != nil {
		t.Errorf("deleting a deleted device: %v, want nil", err)
	}
	if _, err := e.client.GetDevice(ctx, d.GetId()); !metal.IsNotFound(err) {
		t.Errorf("deleted device: %v, want not found", err)
	}
}

func TestEnsureDeviceRefusesDuplicates(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	for _, host := range []string{"a", "b"} {
		// Devices created behind EnsureDevice's back, with the same tag.
		if _, err := e.client.EnsureDevice(ctx, metal.DeviceRequest{Tag: "dup-" + host, Plan: "p", Metro: "da", OperatingSystem: "os", Tags: []string{"shared"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.client.EnsureDevice(ctx, metal.DeviceRequest{Tag: "shared", Plan: "p", Metro: "da", OperatingSystem: "os"}); err == nil {
		t.Error("EnsureDevice picked one of two devices carrying its tag")
	}
	if _, err := e.client.EnsureDevice(ctx, metal.DeviceRequest{Plan: "p", Metro: "da", OperatingSystem: "os"}); err == nil {
		t.Error("EnsureDevice accepted a request without a tag")
	}
	if _, err := e.client.EnsureDevice(ctx, metal.DeviceRequest{Tag: "x", Plan: "p", Metro: "da", OperatingSystem: "os", BillingCycle: "weekly"}); err == nil {
		t.Error("EnsureDevice accepted an unknown billing cycle")
	}
	_, err := e.client.EnsureDevice(ctx, metal.DeviceRequest{Tag: "y", Plan: "p", Metro: "xx", OperatingSystem: "os"})
	if !metal.IsUnprocessable(err) {
		t.Errorf("unknown metro: %v, want unprocessable", err)
	}
}

func TestDeviceProvisioning(t *testing.T) {
	e := newEnv(t, envOptions{sim: sim.Options{DeviceProvisionDelay: 10 * time.Minute}})
	ctx := context.Background()

	state := func(d *metalv1.Device) metalv1.DeviceState {
		t.Helper()
		got, err := e.client.GetDevice(ctx, d.GetId())
		if err != nil {
			t.Fatal(err)
		}
		return got.GetState()
	}
	ok := e.device(t, "ok")
	failing, err := e.client.EnsureDevice(ctx, metal.DeviceRequest{Tag: "bad", Plan: sim.FailProvisioningPlan, Metro: "da", OperatingSystem: "os"})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		advance     time.Duration
		ok, failing metalv1.DeviceState
	}{
		{0, metalv1.DEVICESTATE_QUEUED, metalv1.DEVICESTATE_QUEUED},
		{5 * time.Minute, metalv1.DEVICESTATE_PROVISIONING, metalv1.DEVICESTATE_PROVISIONING},
		{5 * time.Minute, metalv1.DEVICESTATE_ACTIVE, metalv1.DEVICESTATE_FAILED},
	} {
		e.clock.Advance(step.advance)
		if got := state(ok); got != step.ok {
			t.Errorf("after +%s the device is %s, want %s", step.advance, got, step.ok)
		}
		if got := state(failing); got != step.failing {
			t.Errorf("after +%s the failing device is %s, want %s", step.advance, got, step.failing)
		}
	}

	if err := e.sim.PostUserState(ok.GetId(), "succeeded", 1000, "node joined"); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.PostUserState(failing.GetId(), "running", 1000, "no OS"); err == nil {
		t.Error("a failed device posted a user state")
	}
	events, err := e.client.DeviceEvents(ctx, ok.GetId())
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range events {
		types = append(types, ev.GetType())
	}
	want := []string{sim.EventUserState, sim.EventProvisionComplete, sim.EventProvisionStarted, sim.EventCreated}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Fatalf("event types = %v, want %v (newest first)", types, want)
	}
	if ev := events[0]; ev.GetState() != "succeeded" || ev.GetBody() != "node joined" {
		t.Errorf("user state event = %+v", ev)
	}
}

func TestListDevicesPaginates(t *testing.T) {
	e := newEnv(t, envOptions{config: func(c *metal.Config) { c.PageSize = 2 }})
	ctx := context.Background()
	for i := range 5 {
		e.device(t, fmt.Sprintf("node-%d", i))
	}
	e.sim.ResetCalls()
	devices, err := e.client.ListDevices(ctx, metal.DeviceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) != 5 {
		t.Fatalf("got %d devices, want 5", len(devices))
	}
	for i, d := range devices {
		if want := fmt.Sprintf("node-%d", i); d.GetHostname() != want {
			t.Errorf("device %d is %s, want %s (creation order)", i, d.GetHostname(), want)
		}
	}
	if n := e.sim.Calls(sim.OpFindProjectDevices); n != 3 {
		t.Errorf("listing 5 devices by 2 took %d calls, want 3", n)
	}

	// Events paginate too: one device, several user states.
	d := devices[0]
	for i := range 4 {
		if err := e.sim.PostUserState(d.GetId(), "running", 1000+i, "step"); err != nil {
			t.Fatal(err)
		}
	}
	events, err := e.client.DeviceEvents(ctx, d.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 7 { // created, provision started and complete, 4 user states
		t.Errorf("got %d events over pages of 2, want 7", len(events))
	}
}
