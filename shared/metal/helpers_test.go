package metal_test

import (
	"context"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// IDs of the example seed, by the names these tests use.
const (
	token       = simtest.APIKey
	projectID   = simtest.Project
	vrfID       = simtest.VRF
	nodesResID  = simtest.NodesReservation // 10.60.1.0/29
	lbResID     = simtest.LBReservation    // 10.61.0.0/28
	nodesVLANID = simtest.NodesVLAN        // 1001
	plainVLANID = simtest.PlainVLAN        // 1003
	nodesGWID   = simtest.NodesGateway
)

// fastRetry keeps retry tests quick; Retry-After still applies as sent.
var fastRetry = metal.RetryPolicy{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}

type env struct {
	sim    *sim.Server
	clock  *simtest.FakeClock
	url    string
	client *metal.Client
}

type envOptions struct {
	sim    sim.Options
	config func(*metal.Config)
}

// newEnv serves the example world from a simulator on a fake clock and
// returns a client of its project.
func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	clock := simtest.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	o.sim.Clock = clock
	s, err := simtest.Start(o.sim, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	cfg := metal.Config{APIKey: token, ProjectID: projectID, BaseURL: s.URL, Retry: fastRetry, Timeout: 10 * time.Second}
	if o.config != nil {
		o.config(&cfg)
	}
	c, err := metal.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{sim: s.Server, clock: clock, url: s.URL, client: c}
}

// device provisions a device (active at once with the default zero delay).
func (e *env) device(t *testing.T, tag string) *metalv1.Device {
	t.Helper()
	d, err := e.client.EnsureDevice(context.Background(), metal.DeviceRequest{
		Tag: tag, Hostname: tag, Plan: "m3.small.x86", Metro: "da", OperatingSystem: "ubuntu_24_04",
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// portID returns the ID of the port of d with the given name.
func portID(t *testing.T, d *metalv1.Device, name string) string {
	t.Helper()
	for _, p := range d.GetNetworkPorts() {
		if p.GetName() == name {
			return p.GetId()
		}
	}
	t.Fatalf("device %s has no port %s", d.GetId(), name)
	return ""
}
