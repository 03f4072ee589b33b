package metal_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
)

func TestVRFs(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()

	vrfs, err := e.client.ListVRFs(ctx, "da")
	if err != nil {
		t.Fatal(err)
	}
	if len(vrfs) != 1 || vrfs[0].GetId() != vrfID {
		t.Fatalf("ListVRFs(da) = %+v, want the seeded VRF", vrfs)
	}
	if got := vrfs[0].GetIpRanges(); !slices.Equal(got, []string{"10.60.0.0/22", "10.61.0.0/24"}) {
		t.Errorf("ip_ranges = %v", got)
	}
	if m := vrfs[0].GetMetro(); m.GetCode() != "da" || m.GetName() != "Dallas" {
		t.Errorf("metro = %+v", m)
	}
	if other, err := e.client.ListVRFs(ctx, "sv"); err != nil || len(other) != 0 {
		t.Errorf("ListVRFs(sv) = %v, %v; want none", other, err)
	}

	v, err := e.client.GetVRF(ctx, vrfID)
	if err != nil {
		t.Fatal(err)
	}
	if v.GetName() != "capi-vrf" || v.GetLocalAsn() != 65100 {
		t.Errorf("GetVRF = %+v", v)
	}
	if _, err := e.client.GetVRF(ctx, "00000000-0000-4000-8000-000000000000"); !metal.IsNotFound(err) {
		t.Errorf("GetVRF(unknown) error = %v, want not found", err)
	}
}

func TestVRFIPReservations(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()

	list, err := e.client.ListVRFIPReservations(ctx, vrfID)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("got %d reservations, want 2", len(list))
	}
	nodes, err := e.client.GetVRFIPReservation(ctx, vrfID, nodesResID)
	if err != nil {
		t.Fatal(err)
	}
	if nodes.GetNetwork() != "10.60.1.0" || nodes.GetCidr() != 29 || nodes.GetGateway() != "10.60.1.1" || nodes.GetNetmask() != "255.255.255.248" {
		t.Errorf("reservation = %s/%d gateway %s netmask %s", nodes.GetNetwork(), nodes.GetCidr(), nodes.GetGateway(), nodes.GetNetmask())
	}
	if gw := nodes.GetMetalGateway(); gw.GetId() != nodesGWID || gw.GetGatewayAddress() != "10.60.1.1/29" || gw.GetVlan() != 1001 {
		t.Errorf("metal_gateway = %+v", gw)
	}
	if vrf := nodes.GetVrf(); vrf.GetId() != vrfID {
		t.Errorf("vrf = %+v", vrf)
	}

	req := metal.VRFIPReservationRequest{VRFID: vrfID, Prefix: netip.MustParsePrefix("10.60.2.0/24"), Tags: []string{"pool"}}
	created, err := e.client.EnsureVRFIPReservation(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if created.GetNetwork() != "10.60.2.0" || created.GetCidr() != 24 || !slices.Equal(created.GetTags(), []string{"pool"}) {
		t.Errorf("created %+v", created)
	}
	again, err := e.client.EnsureVRFIPReservation(ctx, req)
	if err != nil || again.GetId() != created.GetId() {
		t.Fatalf("second EnsureVRFIPReservation = %v, %v; want the same reservation", again.GetId(), err)
	}
	if n := e.sim.Calls(sim.OpRequestIPReservation); n != 1 {
		t.Errorf("requestIPReservation called %d times, want 1", n)
	}

	if err := e.client.DeleteIPReservation(ctx, created.GetId()); err != nil {
		t.Fatal(err)
	}
	if err := e.client.DeleteIPReservation(ctx, created.GetId()); err != nil {
		t.Errorf("deleting a deleted reservation: %v, want nil", err)
	}
	if _, err := e.client.GetVRFIPReservation(ctx, vrfID, created.GetId()); !metal.IsNotFound(err) {
		t.Errorf("deleted reservation: %v, want not found", err)
	}
	err = e.client.DeleteIPReservation(ctx, nodesResID)
	if !metal.IsUnprocessable(err) || !strings.Contains(strings.Join(metal.ErrorMessages(err), ""), "in use by Metal Gateway") {
		t.Errorf("deleting a gateway's reservation: %v, want 422 in use", err)
	}
}

func TestVRFIPReservationValidation(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()

	for _, tc := range []struct {
		name, prefix, message string
	}{
		{"outside every range", "10.99.0.0/29", "not within any IP range"},
		{"too large", "10.60.0.0/21", "cidr must be between 22 and 29"},
		{"too small", "10.60.3.0/30", "cidr must be between 22 and 29"},
		{"overlapping", "10.60.1.0/28", "overlaps VRF IP reservation 10.60.1.0/29"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.client.EnsureVRFIPReservation(ctx, metal.VRFIPReservationRequest{VRFID: vrfID, Prefix: netip.MustParsePrefix(tc.prefix)})
			if !metal.IsUnprocessable(err) {
				t.Fatalf("error = %v, want unprocessable", err)
			}
			if msgs := metal.ErrorMessages(err); len(msgs) != 1 || !strings.Contains(msgs[0], tc.message) {
				t.Errorf("messages = %q, want one containing %q", msgs, tc.message)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %q does not carry the API's message", err)
			}
		})
	}

	_, err := e.client.EnsureVRFIPReservation(ctx, metal.VRFIPReservationRequest{VRFID: vrfID, Prefix: netip.MustParsePrefix("10.60.2.1/29")})
	if err == nil || metal.IsUnprocessable(err) {
		t.Errorf("a host prefix: %v, want a client-side error", err)
	}
}
