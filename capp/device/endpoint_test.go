package device

import "testing"

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
