package metal_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
)

func TestRetryHonoursRetryAfter(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.sim.FailNext(sim.OpFindVrfs, 1, http.StatusTooManyRequests, time.Second)

	start := time.Now()
	vrfs, err := e.client.ListVRFs(context.Background(), "")
	if err != nil || len(vrfs) != 1 {
		t.Fatalf("ListVRFs after a 429 = %v, %v", vrfs, err)
	}
	if elapsed := time.Since(start); elapsed < time.Second || elapsed > 5*time.Second {
		t.Errorf("retry came after %s, want the 1s of Retry-After", elapsed)
	}
	if n := e.sim.Calls(sim.OpFindVrfs); n != 2 {
		t.Errorf("findVrfs called %d times, want 2", n)
	}
}

func TestRetryOnServerErrors(t *testing.T) {
	for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			e := newEnv(t, envOptions{})
			e.sim.FailNext(sim.OpFindVrfByID, 2, status, 0)
			start := time.Now()
			if _, err := e.client.GetVRF(context.Background(), vrfID); err != nil {
				t.Fatal(err)
			}
			if n := e.sim.Calls(sim.OpFindVrfByID); n != 3 {
				t.Errorf("findVrfById called %d times, want 3", n)
			}
			if elapsed := time.Since(start); elapsed > time.Second {
				t.Errorf("two retries took %s with millisecond backoff", elapsed)
			}
		})
	}
}

func TestRetryGivesUp(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()

	e.sim.FailNext(sim.OpFindVrfByID, 100, http.StatusServiceUnavailable, 0)
	_, err := e.client.GetVRF(ctx, vrfID)
	var apiErr *metal.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.Attempts != fastRetry.MaxAttempts {
		t.Fatalf("error = %#v, want a 503 APIError after %d attempts", err, fastRetry.MaxAttempts)
	}
	if n := e.sim.Calls(sim.OpFindVrfByID); n != fastRetry.MaxAttempts {
		t.Errorf("findVrfById called %d times, want %d", n, fastRetry.MaxAttempts)
	}

	e.sim.ClearFaults()
	e.sim.FailNext(sim.OpFindVirtualNetworks, 100, http.StatusTooManyRequests, 0)
	if _, err := e.client.ListVirtualNetworks(ctx, "da"); !metal.IsRateLimited(err) {
		t.Errorf("persistent 429: %v, want rate limited", err)
	}

	// A Retry-After beyond the call's deadline is not waited for.
	short := newEnv(t, envOptions{config: func(c *metal.Config) { c.Timeout = 500 * time.Millisecond }})
	short.sim.FailNext(sim.OpFindVrfs, 1, http.StatusTooManyRequests, time.Minute)
	start := time.Now()
	if _, err := short.client.ListVRFs(ctx, ""); !metal.IsRateLimited(err) {
		t.Errorf("429 with a long Retry-After: %v, want rate limited", err)
	}
	if elapsed := time.Since(start); elapsed > 400*time.Millisecond {
		t.Errorf("gave up after %s, want at once", elapsed)
	}
}

func TestCreatesAreNotRetriedBlindly(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	req := metal.DeviceRequest{Tag: "machine-1", Plan: "p", Metro: "da", OperatingSystem: "os"}

	e.sim.FailNext(sim.OpCreateDevice, 1, http.StatusInternalServerError, 0)
	if _, err := e.client.EnsureDevice(ctx, req); err == nil {
		t.Fatal("a create that failed with 500 was retried into success")
	}
	if n := e.sim.Calls(sim.OpCreateDevice); n != 1 {
		t.Errorf("createDevice called %d times after a 500, want 1", n)
	}
	// The safe retry is calling EnsureDevice again.
	if _, err := e.client.EnsureDevice(ctx, req); err != nil {
		t.Fatal(err)
	}

	// A 429 means the platform did not act: repeating is safe.
	e.sim.ResetCalls()
	e.sim.FailNext(sim.OpRequestIPReservation, 1, http.StatusTooManyRequests, 0)
	if _, err := e.client.EnsureVRFIPReservation(ctx, metal.VRFIPReservationRequest{VRFID: vrfID, Prefix: netip.MustParsePrefix("10.60.3.0/29")}); err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Calls(sim.OpRequestIPReservation); n != 2 {
		t.Errorf("requestIPReservation called %d times around a 429, want 2", n)
	}

	// A batch is a job: a second one is not sent after a 503.
	d := e.device(t, "node")
	e.sim.FailNext(sim.OpCreatePortVlanAssignmentBatch, 1, http.StatusServiceUnavailable, 0)
	if _, err := e.client.CreateVLANAssignmentBatch(ctx, portID(t, d, "bond0"), []metal.VLANAssignment{{VLAN: "1001"}}); err == nil {
		t.Error("a batch create that failed with 503 was retried")
	}
}

func TestPortActionsAreRetried(t *testing.T) {
	e := newEnv(t, envOptions{})
	d := e.device(t, "node")
	e.sim.FailNext(sim.OpAssignPort, 1, http.StatusServiceUnavailable, 0)
	if _, err := e.client.AssignPort(context.Background(), portID(t, d, "bond0"), "1001"); err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Calls(sim.OpAssignPort); n != 2 {
		t.Errorf("assignPort called %d times around a 503, want 2", n)
	}
}

func TestRetryOnConnectionFailures(t *testing.T) {
	// A port nothing listens on: every attempt fails to connect.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	c, err := metal.NewClient(metal.Config{APIKey: token, ProjectID: projectID, BaseURL: "http://" + addr, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.GetVRF(context.Background(), vrfID)
	if err == nil {
		t.Fatal("no error without a server")
	}
	if want := "after 4 attempts"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want it to say %q", err, want)
	}
}
