package device

import (
	"testing"
	"time"
)

func TestPlanEndpoint(t *testing.T) {
	cases := []struct {
		name       string
		assignedTo []string
		want       EndpointAction
	}{
		{"routed nowhere", nil, AssignEndpoint},
		{"routed here", []string{"d1"}, EndpointHere},
		{"routed here among others", []string{"d2", "d1"}, EndpointHere},
		{"routed to another device", []string{"d2"}, EndpointElsewhere},
	}
	for _, c := range cases {
		if got := PlanEndpoint(Endpoint{Address: "198.51.100.1", AssignedTo: c.assignedTo}, "d1"); got != c.want {
			t.Errorf("%s: PlanEndpoint = %d, want %d", c.name, got, c.want)
		}
	}
}

// The reservation kept is the endpoint's host, else the oldest; the others
// are released; none means reserve.
func TestPlanReservation(t *testing.T) {
	res := func(id, addr string, minute int) Endpoint {
		return Endpoint{ReservationID: id, Address: addr, CreatedAt: time.Date(2026, 3, 1, 12, minute, 0, 0, time.UTC)}
	}
	tagged := []Endpoint{res("b", "198.51.100.2", 2), res("a", "198.51.100.1", 1), res("c", "198.51.100.3", 3)}

	if p := PlanReservation(nil, ""); !p.Reserve {
		t.Errorf("no reservation: %+v, want reserve", p)
	}
	p := PlanReservation(tagged, "")
	if p.Reserve || p.Keep.ReservationID != "a" || len(p.Release) != 2 {
		t.Errorf("without a host: keep %s, release %d; want the oldest, a, and 2 released", p.Keep.ReservationID, len(p.Release))
	}
	p = PlanReservation(tagged, "198.51.100.3")
	if p.Keep.ReservationID != "c" || len(p.Release) != 2 || p.Release[0].ReservationID == "c" || p.Release[1].ReservationID == "c" {
		t.Errorf("with host .3: keep %s, release %v; want c kept", p.Keep.ReservationID, p.Release)
	}
	if len(tagged) != 3 || tagged[0].ReservationID != "b" {
		t.Error("PlanReservation changed its argument")
	}
}
