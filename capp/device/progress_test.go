package device

import (
	"testing"
	"time"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// TestProvisioningProgress: what the provisioning polls go by, read from
// the platform's device through the SDK: nothing while queued, then when
// provisioning started (its provisioning.101 event) and the percentage,
// nothing once active.
func TestProvisioningProgress(t *testing.T) {
	start := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	clock := simtest.NewFakeClock(start)
	s, err := simtest.Start(sim.Options{Clock: clock, DeviceProvisionDelay: 10 * time.Minute, DeviceQueueDelay: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	api, err := metal.NewClient(metal.Config{APIKey: simtest.APIKey, BaseURL: s.URL, ProjectID: simtest.Project})
	if err != nil {
		t.Fatal(err)
	}
	x := Executor{API: api}
	owner := Owner{Project: simtest.Project, UID: "progress"}
	created, err := x.Create(t.Context(), metal.DeviceRequest{
		Tag: MachineTagPrefix + owner.UID, Hostname: "progress", Plan: "c3.small.x86", Metro: simtest.Metro, OperatingSystem: "ubuntu_24_04",
		Tags: Tags(nil, owner, false),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		advance time.Duration
		state   string
		since   time.Time
		percent float64
	}{
		{0, StateQueued, time.Time{}, 0},
		{4 * time.Minute, StateProvisioning, start.Add(time.Minute), 100.0 / 3},
		{6 * time.Minute, StateActive, time.Time{}, 0},
	} {
		clock.Advance(step.advance)
		d, err := x.Find(t.Context(), created.ID, owner)
		if err != nil {
			t.Fatal(err)
		}
		if d.State != step.state || !d.ProvisioningSince.Equal(step.since) || d.ProvisioningPercent < step.percent-0.01 || d.ProvisioningPercent > step.percent+0.01 {
			t.Errorf("after +%s: %s since %s at %.2f%%, want %s since %s at %.2f%%", step.advance,
				d.State, d.ProvisioningSince, d.ProvisioningPercent, step.state, step.since, step.percent)
		}
	}
}
