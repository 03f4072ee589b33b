package metal_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
)

func TestPublicIPv4Reservations(t *testing.T) {
	e := newEnv(t, envOptions{config: func(c *metal.Config) { c.PageSize = 2 }})
	ctx := context.Background()

	da, err := e.client.ReservePublicIPv4(ctx, "da", []string{"cluster:a"})
	if err != nil {
		t.Fatal(err)
	}
	if da.GetType() != metalv1.IPRESERVATIONTYPE_PUBLIC_IPV4 || da.GetCidr() != 32 || !da.GetPublic() || da.Metro.GetCode() != "da" {
		t.Errorf("reservation = type %s /%d public %t metro %s", da.GetType(), da.GetCidr(), da.GetPublic(), da.Metro.GetCode())
	}
	addr, err := netip.ParseAddr(da.GetAddress())
	if err != nil || !netip.MustParsePrefix("198.51.100.0/24").Contains(addr) {
		t.Errorf("address %q is not from the simulator's documentation block", da.GetAddress())
	}

	// More reservations than a page: the tag lookup reads every page, and
	// the VRF reservations of the project are not in the list.
	seen := map[string]bool{da.GetAddress(): true}
	for i := range 4 {
		r, err := e.client.ReservePublicIPv4(ctx, "ny", []string{fmt.Sprintf("filler:%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if seen[r.GetAddress()] {
			t.Errorf("address %s handed out twice", r.GetAddress())
		}
		seen[r.GetAddress()] = true
	}
	last, err := e.client.ReservePublicIPv4(ctx, "da", []string{"cluster:b"})
	if err != nil {
		t.Fatal(err)
	}
	all, err := e.client.ListPublicIPv4Reservations(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 6 {
		t.Errorf("listed %d public reservations, want 6", len(all))
	}
	byTag, err := e.client.ListPublicIPv4Reservations(ctx, "cluster:b")
	if err != nil {
		t.Fatal(err)
	}
	if len(byTag) != 1 || byTag[0].GetId() != last.GetId() {
		t.Errorf("by tag cluster:b = %+v, want %s", byTag, last.GetId())
	}
	if e.sim.Calls(sim.OpFindIPReservations) < 3 {
		t.Errorf("the list made %d calls, want every page read", e.sim.Calls(sim.OpFindIPReservations))
	}

	got, err := e.client.GetIPReservation(ctx, da.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if got.GetAddress() != da.GetAddress() {
		t.Errorf("GetIPReservation address = %s, want %s", got.GetAddress(), da.GetAddress())
	}
	if _, err := e.client.GetIPReservation(ctx, nodesResID); err == nil || metal.IsNotFound(err) {
		t.Errorf("GetIPReservation(VRF reservation) error = %v, want one saying it is not public", err)
	}

	if err := e.client.DeleteIPReservation(ctx, da.GetId()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.GetIPReservation(ctx, da.GetId()); !metal.IsNotFound(err) {
		t.Errorf("GetIPReservation after delete error = %v, want not found", err)
	}
	if err := e.client.DeleteIPReservation(ctx, da.GetId()); err != nil {
		t.Errorf("repeated delete = %v, want nil", err)
	}
	// The VRF reservations are untouched by all of this.
	if vrf, err := e.client.ListVRFIPReservations(ctx, vrfID); err != nil || len(vrf) != 2 {
		t.Errorf("VRF reservations = %d, %v; want the 2 seeded", len(vrf), err)
	}
}

func TestPublicIPv4ReservationRefused(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	if _, err := e.client.ReservePublicIPv4(ctx, "xx", nil); !errors422(err) {
		t.Errorf("unknown metro: error = %v, want 422", err)
	}
	if _, err := e.client.ReservePublicIPv4(ctx, "", nil); err == nil {
		t.Error("no metro: no error")
	}
	// A metro's block runs out after 16 addresses.
	for i := range 16 {
		if _, err := e.client.ReservePublicIPv4(ctx, "sv", nil); err != nil {
			t.Fatalf("reservation %d: %v", i, err)
		}
	}
	_, err := e.client.ReservePublicIPv4(ctx, "sv", nil)
	if !errors422(err) {
		t.Fatalf("17th reservation error = %v, want 422", err)
	}
	// A failed create is not repeated: it may have reserved an address.
	e.sim.FailNext(sim.OpRequestIPReservation, 1, http.StatusServiceUnavailable, 0)
	e.sim.ResetCalls()
	if _, err := e.client.ReservePublicIPv4(ctx, "da", nil); err == nil {
		t.Error("503: no error")
	}
	if n := e.sim.Calls(sim.OpRequestIPReservation); n != 1 {
		t.Errorf("a failed create made %d calls, want 1", n)
	}
}

// errors422 reports a 422 that carries the API's reason.
func errors422(err error) bool {
	apiErr, ok := errors.AsType[*metal.APIError](err)
	return metal.IsUnprocessable(err) && ok && len(apiErr.Messages) > 0
}

// An elastic address is routed to one device at a time, in its metro; the
// reservation shows where it is routed, and a device's deletion frees it.
func TestIPAssignments(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	res, err := e.client.ReservePublicIPv4(ctx, "da", []string{"cluster:a"})
	if err != nil {
		t.Fatal(err)
	}
	elsewhere, err := e.client.ReservePublicIPv4(ctx, "ny", nil)
	if err != nil {
		t.Fatal(err)
	}
	first, second := e.device(t, "cp-1"), e.device(t, "cp-2")

	a, err := e.client.AssignIPAddress(ctx, first.GetId(), res.GetAddress()+"/32")
	if err != nil {
		t.Fatal(err)
	}
	if a.GetAddress() != res.GetAddress() || !strings.HasSuffix(a.AssignedTo.GetHref(), first.GetId()) || a.GetManagement() {
		t.Errorf("assignment = address %s to %s management %t", a.GetAddress(), a.AssignedTo.GetHref(), a.GetManagement())
	}
	got, err := e.client.GetIPReservation(ctx, res.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if as := got.GetAssignments(); len(as) != 1 || as[0].GetId() != a.GetId() {
		t.Errorf("reservation lists assignments %v, want %s", as, a.GetId())
	}
	dev, err := e.client.GetDevice(ctx, first.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(dev.GetIpAddresses()); n != len(first.GetIpAddresses())+1 {
		t.Errorf("device has %d addresses after the assignment, want %d", n, len(first.GetIpAddresses())+1)
	}

	refused := []struct {
		name, device, address string
	}{
		{"already routed", second.GetId(), res.GetAddress()},
		{"routed here already", first.GetId(), res.GetAddress()},
		{"other metro", first.GetId(), elsewhere.GetAddress()},
		{"not reserved", first.GetId(), "203.0.113.7"},
	}
	for _, c := range refused {
		if _, err := e.client.AssignIPAddress(ctx, c.device, c.address); !metal.IsUnprocessable(err) {
			t.Errorf("%s: assigning %s = %v, want unprocessable", c.name, c.address, err)
		}
	}
	if err := e.client.DeleteIPReservation(ctx, res.GetId()); !metal.IsUnprocessable(err) {
		t.Errorf("deleting an assigned reservation = %v, want unprocessable", err)
	}

	if err := e.client.DeleteDevice(ctx, first.GetId()); err != nil {
		t.Fatal(err)
	}
	if got, err := e.client.GetIPReservation(ctx, res.GetId()); err != nil || len(got.GetAssignments()) != 0 {
		t.Errorf("after the device's deletion the reservation lists %v (%v), want no assignment", got.GetAssignments(), err)
	}
	if _, err := e.client.AssignIPAddress(ctx, second.GetId(), res.GetAddress()); err != nil {
		t.Errorf("assigning the freed address to another device: %v", err)
	}
}
