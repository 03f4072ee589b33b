package sim_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
)

// nodeDo sends an unauthenticated request, as a node does; httptest serves
// on 127.0.0.1, the source address the tests bind.
func nodeDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	resp, data := send(t, method, url, body, "")
	return resp.StatusCode, data
}

var loopback = netip.MustParseAddr("127.0.0.1")

func TestMetadataService(t *testing.T) {
	a := newAPI(t, sim.Options{})
	ctx := context.Background()

	status, body := nodeDo(t, http.MethodGet, a.url+"/metadata", "")
	if status != http.StatusNotFound || !strings.Contains(body, "127.0.0.1") {
		t.Errorf("unbound address: %d %s, want 404 naming the address", status, body)
	}
	if err := a.sim.BindNode(loopback, "nope"); err == nil {
		t.Error("bound an address to an unknown device")
	}

	d, _, err := a.sdk.DevicesApi.CreateDevice(ctx, projectID).CreateDeviceRequest(metalv1.CreateDeviceRequest{
		DeviceCreateInMetroInput: &metalv1.DeviceCreateInMetroInput{
			Metro: "da", Plan: "m3.small.x86", OperatingSystem: "os", Hostname: metalv1.PtrString("node-1"),
			Tags: []string{"cluster:demo"}, SshKeys: []metalv1.SSHKeyInput{{Key: metalv1.PtrString("ssh-ed25519 AAAA x@y")}},
		},
	}).Execute()
	if err != nil {
		t.Fatal(err)
	}
	// Over the admin endpoint, as bin/metalsim users do.
	if resp, msg := a.do(t, http.MethodPost, "/_sim/nodes", `{"address": "127.0.0.1", "deviceID": "`+d.GetId()+`"}`); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST /_sim/nodes = %d %s", resp.StatusCode, msg)
	}

	status, body = nodeDo(t, http.MethodGet, a.url+"/metadata", "")
	if status != http.StatusOK {
		t.Fatalf("metadata = %d %s", status, body)
	}
	var md struct {
		ID, Hostname, Plan, Metro string
		Tags                      []string
		SSHKeys                   []string `json:"ssh_keys"`
		UserStateURL              string   `json:"user_state_url"`
		Network                   struct {
			Bonding    struct{ Mode int }
			Interfaces []struct{ Name, MAC, Bond string }
		}
	}
	if err := json.Unmarshal([]byte(body), &md); err != nil {
		t.Fatal(err)
	}
	if md.ID != d.GetId() || md.Hostname != "node-1" || md.Plan != "m3.small.x86" || md.Metro != "da" ||
		len(md.Tags) != 1 || len(md.SSHKeys) != 1 || md.Network.Bonding.Mode != 4 {
		t.Errorf("metadata = %+v", md)
	}
	if md.UserStateURL != a.url+"/events" {
		t.Errorf("user_state_url = %q, want %s/events", md.UserStateURL, a.url)
	}
	// The NICs carry the MACs of their ports in the API; the bond none.
	macs := map[string]string{}
	for _, p := range d.GetNetworkPorts() {
		macs[p.GetName()] = p.Data.GetMac()
	}
	if len(md.Network.Interfaces) != 3 {
		t.Fatalf("interfaces = %+v, want bond0, eth0, eth1", md.Network.Interfaces)
	}
	for _, iface := range md.Network.Interfaces {
		wantMAC, wantBond := macs[iface.Name], "bond0"
		if iface.Name == "bond0" {
			wantMAC, wantBond = "", ""
		}
		if iface.MAC != wantMAC || iface.Bond != wantBond {
			t.Errorf("interface %s: mac %q bond %q, want %q %q", iface.Name, iface.MAC, iface.Bond, wantMAC, wantBond)
		}
	}

	// The node reports its state to the user_state_url.
	if status, body := nodeDo(t, http.MethodPost, md.UserStateURL, `{"state": "running", "code": 1000, "message": "network_configuration_started"}`); status/100 != 2 {
		t.Fatalf("POST /events = %d %s", status, body)
	}
	for _, bad := range []string{`{"state": "happy", "code": 1000}`, `{"state": "running", "code": 7}`, `not json`} {
		if status, body := nodeDo(t, http.MethodPost, md.UserStateURL, bad); status/100 != 4 || !strings.Contains(body, "error") {
			t.Errorf("POST /events %s = %d %s, want 4xx with a message", bad, status, body)
		}
	}
	events, _, err := a.sdk.EventsApi.FindDeviceEvents(ctx, d.GetId()).Execute()
	if err != nil {
		t.Fatal(err)
	}
	if ev := events.GetEvents()[0]; ev.GetType() != sim.EventUserState || ev.GetState() != "running" || ev.GetBody() != "network_configuration_started" {
		t.Errorf("newest event = %s %s %s, want the user state", ev.GetType(), ev.GetState(), ev.GetBody())
	}
	if n := a.sim.Answers(sim.OpPostUserStateEvent, http.StatusNoContent); n != 1 {
		t.Errorf("%d user states accepted, want 1", n)
	}

	if _, err := a.sdk.DevicesApi.DeleteDevice(ctx, d.GetId()).Execute(); err != nil {
		t.Fatal(err)
	}
	if status, body := nodeDo(t, http.MethodGet, a.url+"/metadata", ""); status != http.StatusNotFound || !strings.Contains(body, d.GetId()) {
		t.Errorf("metadata of a deleted device = %d %s, want 404 naming it", status, body)
	}
}
