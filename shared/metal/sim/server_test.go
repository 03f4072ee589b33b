package sim_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// IDs of the example seed, by the names these tests use.
const (
	token     = simtest.APIKey
	projectID = simtest.Project
	vrfID     = simtest.VRF
	gatewayID = simtest.NodesGateway
)

// api is the example world served over HTTP, with a bare SDK client: these
// tests exercise the wire contract itself, without the metal package.
type api struct {
	sim   *sim.Server
	clock *simtest.FakeClock
	url   string
	sdk   *metalv1.APIClient
}

func newAPI(t *testing.T, opts sim.Options) *api {
	t.Helper()
	clock := simtest.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	opts.Clock = clock
	s, err := simtest.Start(opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return &api{sim: s.Server, clock: clock, url: s.URL, sdk: simtest.SDK(s.URL, token)}
}

// do sends a raw request with the example project's key.
func (a *api) do(t *testing.T, method, path, body string) (*http.Response, string) {
	t.Helper()
	return send(t, method, a.url+path, body, token)
}

// send makes a request with the API token authToken, none when empty, and
// returns the answer with its body.
func send(t *testing.T, method, url, body, authToken string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if authToken != "" {
		req.Header.Set("X-Auth-Token", authToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(data)
}

func TestAuthentication(t *testing.T) {
	a := newAPI(t, sim.Options{APIKeys: []string{"user-key"}})
	ctx := context.Background()

	for _, key := range []string{"", "wrong"} {
		_, resp, err := simtest.SDK(a.url, key).VRFsApi.FindVrfById(ctx, vrfID).Execute()
		if err == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("key %q: %v, want 401", key, err)
		}
	}
	if _, _, err := simtest.SDK(a.url, "user-key").VRFsApi.FindVrfById(ctx, vrfID).Execute(); err != nil {
		t.Errorf("a user-level key: %v", err)
	}

	// A project's key does not open another project's objects.
	other := &sim.SeedFile{Projects: []sim.SeedProject{{ID: "other", Name: "other", APIKeys: []string{"other-key"}}}}
	if err := a.sim.Seed(other); err != nil {
		t.Fatal(err)
	}
	foreign := simtest.SDK(a.url, "other-key")
	if _, resp, err := foreign.VRFsApi.FindVrfById(ctx, vrfID).Execute(); err == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("another project's VRF: %v, want 404", err)
	}
	if _, resp, err := foreign.VRFsApi.FindVrfs(ctx, projectID).Execute(); err == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("another project's VRF list: %v, want 404", err)
	}
}

func TestErrorAnswersAreJSON(t *testing.T) {
	a := newAPI(t, sim.Options{})
	for _, tc := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/metal/v1/nothing-here", "", http.StatusNotFound},
		{"GET", "/metal/v1/vrfs/missing", "", http.StatusNotFound},
		{"POST", "/metal/v1/projects/" + projectID + "/ips", "{not json", http.StatusBadRequest},
		{"POST", "/metal/v1/projects/" + projectID + "/ips", `{"type": "vrf"}`, http.StatusUnprocessableEntity},
		{"POST", "/metal/v1/projects/" + projectID + "/ips", `{"type": "public_ipv4", "quantity": 1}`, http.StatusUnprocessableEntity},
		{"POST", "/metal/v1/projects/" + projectID + "/devices", `{"hostname": "x"}`, http.StatusUnprocessableEntity},
		{"GET", "/metal/v1/projects/" + projectID + "/devices?page=0", "", http.StatusUnprocessableEntity},
	} {
		resp, body := a.do(t, tc.method, tc.path, tc.body)
		var e metalv1.Error
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(body), &e) != nil || len(e.GetErrors()) == 0 {
			t.Errorf("%s %s: %d %s %q, want %d with a JSON error", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.status)
		}
	}
}

// TestGatewaysNeedIncludes pins the SDK behaviour the client works around:
// without include=ip_reservation the API answers the reservation as a bare
// reference, and the SDK's oneOf cannot decode the gateway.
func TestGatewaysNeedIncludes(t *testing.T) {
	a := newAPI(t, sim.Options{})
	ctx := context.Background()
	if _, _, err := a.sdk.MetalGatewaysApi.FindMetalGatewayById(ctx, gatewayID).Execute(); err == nil {
		t.Error("a gateway without includes decoded: the simulator is expanding what the API does not")
	}
	g, _, err := a.sdk.MetalGatewaysApi.FindMetalGatewayById(ctx, gatewayID).Include([]string{"ip_reservation"}).Execute()
	if err != nil || g.VrfMetalGateway == nil || g.MetalGateway != nil {
		t.Fatalf("gateway with its reservation = %+v, %v; want a VrfMetalGateway", g, err)
	}
	if vn := g.VrfMetalGateway.VirtualNetwork; vn.GetHref() == "" || vn.Vxlan != nil {
		t.Errorf("virtual_network not included = %+v, want a bare reference", vn)
	}
}

func TestPaginationMeta(t *testing.T) {
	a := newAPI(t, sim.Options{})
	ctx := context.Background()
	for i := range 5 {
		in := metalv1.DeviceCreateInMetroInput{Metro: "da", Plan: "p", OperatingSystem: "os", Hostname: metalv1.PtrString(string(rune('a' + i)))}
		if _, _, err := a.sdk.DevicesApi.CreateDevice(ctx, projectID).CreateDeviceRequest(metalv1.CreateDeviceRequest{DeviceCreateInMetroInput: &in}).Execute(); err != nil {
			t.Fatal(err)
		}
	}
	list, _, err := a.sdk.DevicesApi.FindProjectDevices(ctx, projectID).Page(2).PerPage(2).Execute()
	if err != nil {
		t.Fatal(err)
	}
	m := list.Meta
	if len(list.Devices) != 2 || m.GetTotal() != 5 || m.GetCurrentPage() != 2 || m.GetLastPage() != 3 {
		t.Errorf("page 2 of 5 by 2: %d devices, meta %+v", len(list.Devices), m)
	}
	if !strings.Contains(m.Next.GetHref(), "page=3") || !strings.Contains(m.Previous.GetHref(), "page=1") || !strings.Contains(m.Last.GetHref(), "page=3") {
		t.Errorf("links: next %s previous %s last %s", m.Next.GetHref(), m.Previous.GetHref(), m.Last.GetHref())
	}
	all, err := a.sdk.DevicesApi.FindProjectDevices(ctx, projectID).PerPage(2).ExecuteWithPagination()
	if err != nil || len(all.Devices) != 5 {
		t.Errorf("the SDK's own pagination: %d devices, %v", len(all.GetDevices()), err)
	}
	first, _, err := a.sdk.DevicesApi.FindProjectDevices(ctx, projectID).Execute()
	if err != nil || first.Meta.GetLastPage() != 1 || len(first.Devices) != 5 || first.Meta.Next != nil {
		t.Errorf("default page: %d devices, meta %+v", len(first.GetDevices()), first.Meta)
	}
}

func TestLatency(t *testing.T) {
	a := newAPI(t, sim.Options{Latency: 200 * time.Millisecond})
	start := time.Now()
	if _, _, err := a.sdk.VRFsApi.FindVrfById(context.Background(), vrfID).Execute(); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed < 200*time.Millisecond {
		t.Errorf("answer after %s, want the 200ms latency", elapsed)
	}
	a.sim.SetLatency(0)
	start = time.Now()
	if _, _, err := a.sdk.VRFsApi.FindVrfById(context.Background(), vrfID).Execute(); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed > 150*time.Millisecond {
		t.Errorf("answer after %s with the latency removed", elapsed)
	}
}

func TestAdminEndpoints(t *testing.T) {
	a := newAPI(t, sim.Options{})
	ctx := context.Background()

	if resp, _ := a.do(t, "POST", "/_sim/faults", `{"operation": "findVrfById", "count": 1, "status": 429, "retryAfterSeconds": 7}`); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST /_sim/faults: %d", resp.StatusCode)
	}
	_, resp, err := a.sdk.VRFsApi.FindVrfById(ctx, vrfID).Execute()
	if err == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "7" {
		t.Errorf("faulted call: %v, Retry-After %q", err, resp.Header.Get("Retry-After"))
	}
	if _, _, err := a.sdk.VRFsApi.FindVrfById(ctx, vrfID).Execute(); err != nil {
		t.Errorf("the fault outlived its count: %v", err)
	}
	for _, bad := range []string{
		`{"operation": "noSuchOp", "count": 1, "status": 500}`,
		`{"operation": "findVrfs", "count": 0, "status": 500}`,
		`{"operation": "findVrfs", "count": 1, "status": 200}`,
	} {
		if resp, _ := a.do(t, "POST", "/_sim/faults", bad); resp.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("fault %s: %d, want 422", bad, resp.StatusCode)
		}
	}
	a.do(t, "POST", "/_sim/faults", `{"operation": "findVrfs", "count": 5, "status": 500}`)
	if resp, _ := a.do(t, "DELETE", "/_sim/faults", ""); resp.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE /_sim/faults: %d", resp.StatusCode)
	}
	if _, _, err := a.sdk.VRFsApi.FindVrfs(ctx, projectID).Execute(); err != nil {
		t.Errorf("cleared faults still apply: %v", err)
	}

	_, body := a.do(t, "GET", "/_sim/calls", "")
	var calls map[string]int
	if err := json.Unmarshal([]byte(body), &calls); err != nil || calls["findVrfById"] != 2 || calls["findVrfs"] != 1 {
		t.Errorf("GET /_sim/calls = %s, %v", body, err)
	}

	in := metalv1.DeviceCreateInMetroInput{Metro: "da", Plan: "p", OperatingSystem: "os"}
	d, _, err := a.sdk.DevicesApi.CreateDevice(ctx, projectID).CreateDeviceRequest(metalv1.CreateDeviceRequest{DeviceCreateInMetroInput: &in}).Execute()
	if err != nil {
		t.Fatal(err)
	}
	if resp, body := a.do(t, "POST", "/_sim/devices/"+d.GetId()+"/user-state", `{"state": "succeeded", "code": 1000, "message": "joined"}`); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("posting a user state: %d %s", resp.StatusCode, body)
	}
	if resp, _ := a.do(t, "POST", "/_sim/devices/"+d.GetId()+"/user-state", `{"state": "done", "code": 1000}`); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("an unknown user state: %d, want 422", resp.StatusCode)
	}
	events, _, err := a.sdk.EventsApi.FindDeviceEvents(ctx, d.GetId()).Execute()
	if err != nil || events.Events[0].GetType() != sim.EventUserState || events.Events[0].GetState() != "succeeded" {
		t.Errorf("latest event = %+v, %v", events.GetEvents(), err)
	}

	resp, err = http.Get(a.url + "/_sim/calls")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the controls without a key: %d, want 401", resp.StatusCode)
	}
}

func TestConcurrentRequests(t *testing.T) {
	a := newAPI(t, sim.Options{})
	ctx := context.Background()
	const n = 20
	errs := make(chan error, 2*n)
	for range n {
		go func() {
			in := metalv1.DeviceCreateInMetroInput{Metro: "da", Plan: "p", OperatingSystem: "os", Tags: []string{"concurrent"}}
			_, _, err := a.sdk.DevicesApi.CreateDevice(ctx, projectID).CreateDeviceRequest(metalv1.CreateDeviceRequest{DeviceCreateInMetroInput: &in}).Execute()
			errs <- err
		}()
		go func() {
			_, _, err := a.sdk.DevicesApi.FindProjectDevices(ctx, projectID).Tag("concurrent").Execute()
			errs <- err
		}()
	}
	for range 2 * n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	all, _, err := a.sdk.DevicesApi.FindProjectDevices(ctx, projectID).Tag("concurrent").PerPage(100).Execute()
	if err != nil || len(all.Devices) != n {
		t.Errorf("%d devices after %d concurrent creates, %v", len(all.GetDevices()), n, err)
	}
	if got := a.sim.Calls(sim.OpCreateDevice); got != n {
		t.Errorf("Calls(createDevice) = %d, want %d", got, n)
	}
}

func TestMaxDevicesInFlightAnswersRetryAfter(t *testing.T) {
	a := newAPI(t, sim.Options{MaxDevicesInFlight: 1, DeviceProvisionDelay: time.Minute})
	body := `{"metro": "da", "plan": "p", "operating_system": "os"}`
	if resp, msg := a.do(t, http.MethodPost, "/metal/v1/projects/"+projectID+"/devices", body); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first create = %d %s", resp.StatusCode, msg)
	}
	resp, msg := a.do(t, http.MethodPost, "/metal/v1/projects/"+projectID+"/devices", body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "3" || !strings.Contains(msg, "provisioning") {
		t.Errorf("second create = %d, Retry-After %q, %s; want 429 after 3s with a reason", resp.StatusCode, resp.Header.Get("Retry-After"), msg)
	}
	if n := a.sim.Answers(sim.OpCreateDevice, http.StatusTooManyRequests); n != 1 {
		t.Errorf("Answers(429) = %d, want 1", n)
	}
	a.sim.ResetCalls()
	if n := a.sim.Answers(sim.OpCreateDevice, http.StatusCreated); n != 0 {
		t.Errorf("Answers after ResetCalls = %d, want 0", n)
	}
}

// TestPowerActions: through the SDK, an active device is powered off
// (inactive) and on again (active); powering off one still provisioning, or
// an action the simulator does not model, is refused with the reason.
func TestPowerActions(t *testing.T) {
	a := newAPI(t, sim.Options{DeviceProvisionDelay: time.Minute})
	ctx := context.Background()
	dev, _, err := a.sdk.DevicesApi.CreateDevice(ctx, projectID).CreateDeviceRequest(metalv1.CreateDeviceRequest{
		DeviceCreateInMetroInput: &metalv1.DeviceCreateInMetroInput{Metro: "da", Plan: "p", OperatingSystem: "os"},
	}).Execute()
	if err != nil {
		t.Fatal(err)
	}
	act := func(action metalv1.DeviceActionInputType) error {
		_, err := a.sdk.DevicesApi.PerformAction(ctx, dev.GetId()).DeviceActionInput(metalv1.DeviceActionInput{Type: action}).Execute()
		return err
	}
	state := func() metalv1.DeviceState {
		t.Helper()
		d, _, err := a.sdk.DevicesApi.FindDeviceById(ctx, dev.GetId()).Execute()
		if err != nil {
			t.Fatal(err)
		}
		return d.GetState()
	}
	if err := act(metalv1.DEVICEACTIONINPUTTYPE_POWER_OFF); err == nil || !strings.Contains(err.Error(), "422") {
		t.Errorf("powering off a queued device: %v; want 422", err)
	}
	a.clock.Advance(time.Minute)
	for _, step := range []struct {
		action metalv1.DeviceActionInputType
		want   metalv1.DeviceState
	}{{metalv1.DEVICEACTIONINPUTTYPE_POWER_OFF, metalv1.DEVICESTATE_INACTIVE}, {metalv1.DEVICEACTIONINPUTTYPE_POWER_ON, metalv1.DEVICESTATE_ACTIVE}} {
		if err := act(step.action); err != nil {
			t.Fatalf("%s: %v", step.action, err)
		}
		if got := state(); got != step.want {
			t.Errorf("after %s the device is %s; want %s", step.action, got, step.want)
		}
	}
	if err := act(metalv1.DEVICEACTIONINPUTTYPE_REBOOT); err == nil || !strings.Contains(err.Error(), "422") {
		t.Errorf("reboot: %v; want 422, not modelled", err)
	}
}
