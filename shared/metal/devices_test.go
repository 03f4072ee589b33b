package metal_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	"k8s.io/utils/ptr"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
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

// TestDeviceProvisioningProgress: a device queued for DeviceQueueDelay,
// then provisioning with a provisioning_percentage that grows with its time
// in provisioning, as the platform's does, and none once it is active.
func TestDeviceProvisioningProgress(t *testing.T) {
	e := newEnv(t, envOptions{sim: sim.Options{DeviceProvisionDelay: 10 * time.Minute, DeviceQueueDelay: time.Minute}})
	ctx := context.Background()
	d, err := e.client.EnsureDevice(ctx, metal.DeviceRequest{Tag: "p", Plan: "m3.small.x86", Metro: "da", OperatingSystem: "os"})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		advance time.Duration
		state   metalv1.DeviceState
		percent *float32
	}{
		{0, metalv1.DEVICESTATE_QUEUED, nil},
		{time.Minute, metalv1.DEVICESTATE_PROVISIONING, ptr.To[float32](0)},
		{3 * time.Minute, metalv1.DEVICESTATE_PROVISIONING, ptr.To[float32](100.0 / 3)},
		{6*time.Minute - time.Second, metalv1.DEVICESTATE_PROVISIONING, ptr.To(float32(100 * (9*60 - 1) / (9 * 60.0)))},
		{time.Second, metalv1.DEVICESTATE_ACTIVE, nil},
	} {
		e.clock.Advance(step.advance)
		got, err := e.client.GetDevice(ctx, d.GetId())
		if err != nil {
			t.Fatal(err)
		}
		if got.GetState() != step.state {
			t.Errorf("after +%s the device is %s, want %s", step.advance, got.GetState(), step.state)
		}
		switch p := got.ProvisioningPercentage; {
		case (p == nil) != (step.percent == nil):
			t.Errorf("after +%s provisioning_percentage %v, want %v", step.advance, p, step.percent)
		case p != nil && math.Abs(float64(*p-*step.percent)) > 0.01:
			t.Errorf("after +%s provisioning_percentage %.2f, want %.2f", step.advance, *p, *step.percent)
		}
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

func TestEnsureDevicePlacementAndBoot(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	keys := []string{"ssh-ed25519 AAAA-one a@b", "ssh-ed25519 AAAA-two c@d"}
	d, err := e.client.EnsureDevice(ctx, metal.DeviceRequest{
		Tag: "pxe", Plan: "m3.small.x86", Metro: "ny", Facility: "da11", OperatingSystem: "custom_ipxe",
		IPXEScriptURL: "http://boot.example/node.ipxe", SSHKeys: keys,
	})
	if err != nil {
		t.Fatal(err)
	}
	if f := d.GetFacility(); f.GetCode() != "da11" || d.Metro.GetCode() != "da" {
		t.Errorf("device placed in facility %q, metro %q; want da11 in da (the metro ignored)", f.GetCode(), d.Metro.GetCode())
	}
	if d.GetIpxeScriptUrl() != "http://boot.example/node.ipxe" || d.GetAlwaysPxe() {
		t.Errorf("iPXE script %q, always_pxe %v; want the script, booted once", d.GetIpxeScriptUrl(), d.GetAlwaysPxe())
	}
	if got := d.GetSshKeys(); len(got) != 2 || got[0].Href == got[1].Href {
		t.Errorf("SSH keys = %v, want two distinct keys", got)
	}
	if _, ok := d.GetHardwareReservationOk(); ok {
		t.Error("a device without a reservation shows one")
	}

	metro, err := e.client.EnsureDevice(ctx, metal.DeviceRequest{Tag: "metro", Plan: "m3.small.x86", Metro: "ny", OperatingSystem: "os"})
	if err != nil || metro.Metro.GetCode() != "ny" {
		t.Errorf("metro placement = %v, %v", metro, err)
	}
	for _, facility := range []string{"zz1", "da", "dallas11"} {
		_, err := e.client.EnsureDevice(ctx, metal.DeviceRequest{Tag: "f-" + facility, Plan: "p", Facility: facility, OperatingSystem: "os"})
		if !metal.IsUnprocessable(err) {
			t.Errorf("facility %q: %v, want unprocessable", facility, err)
		}
	}
}

func TestHardwareReservations(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	provisionable := func(id string) (bool, string) {
		t.Helper()
		hr, err := e.client.GetHardwareReservation(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		dev := hr.GetDevice()
		return hr.GetProvisionable(), dev.GetId()
	}
	hr, err := e.client.GetHardwareReservation(ctx, simtest.HardwareReservation1)
	if err != nil {
		t.Fatal(err)
	}
	if plan, f := hr.GetPlan(), hr.GetFacility(); !hr.GetProvisionable() || plan.GetSlug() != simtest.ReservedPlan ||
		f.GetCode() != simtest.ReservedFacility || f.Metro.GetCode() != simtest.Metro {
		t.Errorf("reservation = %+v", hr)
	}
	if _, err := e.client.GetHardwareReservation(ctx, "nope"); !metal.IsNotFound(err) {
		t.Errorf("unknown reservation: %v, want not found", err)
	}
	if otherKey, err := metal.NewClient(metal.Config{APIKey: simtest.OtherAPIKey, BaseURL: e.url}); err != nil {
		t.Fatal(err)
	} else if _, err := otherKey.GetHardwareReservation(ctx, simtest.HardwareReservation1); !metal.IsNotFound(err) {
		t.Errorf("another project's reservation: %v, want not found", err)
	}

	req := func(tag, reservation string) metal.DeviceRequest {
		return metal.DeviceRequest{Tag: tag, Plan: simtest.ReservedPlan, Metro: simtest.Metro, OperatingSystem: "os", HardwareReservationID: reservation}
	}
	d, err := e.client.EnsureDevice(ctx, req("on-1", simtest.HardwareReservation1))
	if err != nil {
		t.Fatal(err)
	}
	if hr := d.GetHardwareReservation(); hr.GetId() != simtest.HardwareReservation1 || d.Facility.GetCode() != simtest.ReservedFacility {
		t.Errorf("device reservation %q, facility %q", hr.GetId(), d.Facility.GetCode())
	}
	if ok, dev := provisionable(simtest.HardwareReservation1); ok || dev != d.GetId() {
		t.Errorf("taken reservation: provisionable %v, device %q; want false, %s", ok, dev, d.GetId())
	}

	_, err = e.client.EnsureDevice(ctx, req("again-1", simtest.HardwareReservation1))
	if !metal.IsUnprocessable(err) || !strings.Contains(strings.Join(metal.ErrorMessages(err), " "), "already provisioned") {
		t.Errorf("taken reservation: %v, want unprocessable saying it is already provisioned", err)
	}
	for name, r := range map[string]metal.DeviceRequest{
		"unknown ID":  req("unknown", "d5a2c0de-0000-4000-8000-0000000000ff"),
		"other plan":  {Tag: "plan", Plan: "m3.small.x86", Metro: simtest.Metro, OperatingSystem: "os", HardwareReservationID: simtest.HardwareReservation2},
		"other metro": {Tag: "metro", Plan: simtest.ReservedPlan, Metro: "ny", OperatingSystem: "os", HardwareReservationID: simtest.HardwareReservation2},
	} {
		if _, err := e.client.EnsureDevice(ctx, r); !metal.IsUnprocessable(err) {
			t.Errorf("%s: %v, want unprocessable", name, err)
		}
	}

	next, err := e.client.EnsureDevice(ctx, req("next", sim.NextAvailable))
	if err != nil {
		t.Fatal(err)
	}
	if hr := next.GetHardwareReservation(); hr.GetId() != simtest.HardwareReservation2 {
		t.Errorf("next-available took %q, want the provisionable %s", hr.GetId(), simtest.HardwareReservation2)
	}
	if _, err := e.client.EnsureDevice(ctx, req("none-left", sim.NextAvailable)); !metal.IsUnprocessable(err) {
		t.Errorf("next-available with none left: %v, want unprocessable", err)
	}

	if err := e.client.DeleteDevice(ctx, d.GetId()); err != nil {
		t.Fatal(err)
	}
	if ok, dev := provisionable(simtest.HardwareReservation1); !ok || dev != "" {
		t.Errorf("after the device is deleted: provisionable %v, device %q; want true, none", ok, dev)
	}
}

func TestMaxDevicesInFlight(t *testing.T) {
	e := newEnv(t, envOptions{
		sim:    sim.Options{MaxDevicesInFlight: 2, DeviceProvisionDelay: 10 * time.Minute},
		config: func(c *metal.Config) { c.Retry.MaxAttempts = 1 },
	})
	ctx := context.Background()
	e.device(t, "a")
	e.device(t, "b")
	_, err := e.client.EnsureDevice(ctx, metal.DeviceRequest{Tag: "c", Plan: "p", Metro: "da", OperatingSystem: "os"})
	if !metal.IsRateLimited(err) {
		t.Fatalf("a third device in flight: %v, want rate limited", err)
	}
	if n := e.sim.Answers(sim.OpCreateDevice, http.StatusTooManyRequests); n != 1 {
		t.Errorf("%d creates answered 429, want 1", n)
	}
	if devices, err := e.client.ListDevices(ctx, metal.DeviceFilter{}); err != nil || len(devices) != 2 {
		t.Errorf("the refused create left %d devices, %v; want 2", len(devices), err)
	}

	e.clock.Advance(10 * time.Minute) // both active: none in flight
	e.device(t, "c")
	if n := e.sim.Answers(sim.OpCreateDevice, http.StatusCreated); n != 3 {
		t.Errorf("%d creates answered 201, want 3", n)
	}
}

func TestDeviceDeprovisioning(t *testing.T) {
	e := newEnv(t, envOptions{sim: sim.Options{DeviceDeprovisionDelay: time.Minute}})
	ctx := context.Background()
	d, err := e.client.EnsureDevice(ctx, metal.DeviceRequest{
		Tag: "hw", Plan: simtest.ReservedPlan, Metro: simtest.Metro, OperatingSystem: "os", HardwareReservationID: simtest.HardwareReservation1,
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second delete, while deprovisioning, changes nothing
		if err := e.client.DeleteDevice(ctx, d.GetId()); err != nil {
			t.Fatal(err)
		}
		got, err := e.client.GetDevice(ctx, d.GetId())
		if err != nil || got.GetState() != metalv1.DEVICESTATE_DEPROVISIONING {
			t.Fatalf("deleted device = %v, %v; want deprovisioning", got.GetState(), err)
		}
		if hr, err := e.client.GetHardwareReservation(ctx, simtest.HardwareReservation1); err != nil || hr.GetProvisionable() {
			t.Errorf("reservation of a deprovisioning device: provisionable %v, %v; want false", hr.GetProvisionable(), err)
		}
		e.clock.Advance(30 * time.Second)
	}
	if n := e.sim.Answers(sim.OpDeleteDevice, http.StatusNoContent); n != 2 {
		t.Errorf("%d deletes answered 204, want 2", n)
	}
	if _, err := e.client.GetDevice(ctx, d.GetId()); !metal.IsNotFound(err) {
		t.Errorf("after the delay: %v, want not found", err)
	}
	if hr, err := e.client.GetHardwareReservation(ctx, simtest.HardwareReservation1); err != nil || !hr.GetProvisionable() {
		t.Errorf("reservation of a gone device: provisionable %v, %v; want true", hr.GetProvisionable(), err)
	}
}

func TestInProject(t *testing.T) {
	e := newEnv(t, envOptions{
		sim:    sim.Options{APIKeys: []string{"user-key"}},
		config: func(c *metal.Config) { c.APIKey, c.ProjectID = "user-key", "" },
	})
	ctx := context.Background()
	if _, err := e.client.ListDevices(ctx, metal.DeviceFilter{}); err == nil {
		t.Error("a client without a project listed devices")
	}
	demo, other := e.client.InProject(simtest.Project), e.client.InProject(simtest.OtherProject)
	if e.client.ProjectID() != "" || demo.ProjectID() != simtest.Project {
		t.Errorf("project IDs %q, %q: InProject changed its receiver or did not scope the copy", e.client.ProjectID(), demo.ProjectID())
	}
	r := metal.DeviceRequest{Tag: "same-tag", Plan: "p", Metro: "da", OperatingSystem: "os"}
	a, err := demo.EnsureDevice(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	b, err := other.EnsureDevice(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if a.GetId() == b.GetId() || b.Project.GetHref() != "/metal/v1/projects/"+simtest.OtherProject {
		t.Errorf("devices %s and %s (project %s): want one per project", a.GetId(), b.GetId(), b.Project.GetHref())
	}

	// A project key reaches its own project only, whatever the client is scoped to.
	scoped, err := metal.NewClient(metal.Config{APIKey: simtest.APIKey, ProjectID: simtest.Project, BaseURL: e.url})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scoped.InProject(simtest.OtherProject).ListDevices(ctx, metal.DeviceFilter{}); !metal.IsNotFound(err) {
		t.Errorf("another project with a project key: %v, want not found", err)
	}
}
