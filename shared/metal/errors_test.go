package metal_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
)

func TestUnauthorized(t *testing.T) {
	e := newEnv(t, envOptions{config: func(c *metal.Config) { c.APIKey = "not-a-key" }})
	_, err := e.client.ListVRFs(context.Background(), "")
	if !metal.IsUnauthorized(err) {
		t.Fatalf("error = %v, want unauthorized", err)
	}
	if metal.IsNotFound(err) || metal.IsUnprocessable(err) || metal.IsRateLimited(err) {
		t.Errorf("a 401 matches other kinds too: %v", err)
	}
	if n := e.sim.Calls(sim.OpFindVrfs); n != 1 {
		t.Errorf("a 401 was retried: %d calls", n)
	}
}

func TestProjectRequired(t *testing.T) {
	e := newEnv(t, envOptions{config: func(c *metal.Config) { c.ProjectID = "" }})
	if _, err := e.client.ListVRFs(context.Background(), ""); err == nil {
		t.Error("a project list ran without a project")
	}
	if _, err := e.client.GetVRF(context.Background(), vrfID); err != nil {
		t.Errorf("GetVRF without a project: %v", err)
	}
}

// TestTokenNeverInErrors drives every kind of failure with a recognisable
// token and checks that no error message, however formatted, contains it.
func TestTokenNeverInErrors(t *testing.T) {
	const secret = "metalsim-demo-token" // the seed's key, accepted by the simulator
	e := newEnv(t, envOptions{config: func(c *metal.Config) { c.APIKey = secret }})
	bad := newEnv(t, envOptions{config: func(c *metal.Config) { c.APIKey = "wrong-" + secret }})
	ctx := context.Background()
	e.sim.FailNext(sim.OpFindVrfByID, 100, http.StatusServiceUnavailable, 0)
	e.sim.FailNext(sim.OpCreateDevice, 1, http.StatusInternalServerError, 0)

	var errs []error
	collect := func(_ any, err error) { errs = append(errs, err) }
	collect(e.client.GetVRF(ctx, vrfID))
	collect(e.client.GetDevice(ctx, "missing"))
	collect(e.client.EnsureVRFIPReservation(ctx, metal.VRFIPReservationRequest{VRFID: vrfID, Prefix: netip.MustParsePrefix("10.99.0.0/29")}))
	collect(e.client.EnsureDevice(ctx, metal.DeviceRequest{Tag: "t", Plan: "p", Metro: "da", OperatingSystem: "os"}))
	collect(bad.client.ListVRFs(ctx, ""))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	collect(e.client.ListDevices(cancelled, metal.DeviceFilter{}))
	unreachable, err := metal.NewClient(metal.Config{APIKey: secret, BaseURL: "http://127.0.0.1:1", Retry: fastRetry, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	collect(unreachable.GetVRF(ctx, vrfID))

	for i, err := range errs {
		if err == nil {
			t.Fatalf("case %d did not fail", i)
		}
		for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
			if msg := fmt.Sprintf(format, err); strings.Contains(msg, secret) {
				t.Errorf("case %d: error %s leaks the token", i, msg)
			}
		}
		for _, m := range metal.ErrorMessages(err) {
			if strings.Contains(m, secret) {
				t.Errorf("case %d: API message %q leaks the token", i, m)
			}
		}
	}
}
