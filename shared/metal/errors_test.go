package metal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/message"
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

// TestAnswersAreNotEchoedRaw: whatever answers at an endpoint writes the
// messages of its errors, and they end up in conditions: an error repeats
// a few of them, each quoted and cut, never the whole answer.
func TestAnswersAreNotEchoedRaw(t *testing.T) {
	huge := strings.Repeat("x", 100_000)
	messages := []string{"line one\nforged: line two", huge}
	for i := range 10 {
		messages = append(messages, fmt.Sprintf("message %d", i))
	}
	body, err := json.Marshal(map[string]any{"errors": messages})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = w.Write(body)
	}))
	defer api.Close()
	c, err := metal.NewClient(metal.Config{APIKey: "k", BaseURL: api.URL, ProjectID: "p", Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.GetVRF(context.Background(), vrfID)
	if err == nil {
		t.Fatal("a 422 was not an error")
	}
	msg := err.Error()
	if len(msg) > 2*message.MaxValue*4 {
		t.Errorf("the error repeats %d bytes of an answer of %d", len(msg), len(body))
	}
	for _, want := range []string{`"line one\nforged: line two"`, "(100000 bytes)", "and 8 more"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error %q carries a raw newline of the answer", msg)
	}
	if !metal.IsUnprocessable(err) || len(metal.ErrorMessages(err)) != len(messages) {
		t.Errorf("the error lost its kind or its messages: %v", err)
	}
}
