// Package simtest starts the Metal API simulator seeded with the example
// world (sim.ExampleSeed) for the tests and suites of every package, and
// names the IDs of that world.
package simtest

import (
	"net/http/httptest"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
)

// The example world: project capi-demo in Dallas (da) with a VRF of two
// ranges, two subnets served by Metal Gateways, three VLANs and two
// hardware reservations; VLAN 1001 again in New York; and an empty second
// project with a key of its own.
const (
	// APIKey is the key of Project.
	APIKey  = "metalsim-demo-token"
	Project = "d5a2c0de-0000-4000-8000-000000000001"
	// Metro is where everything of Project is, New York's VLAN aside.
	Metro = "da"

	// OtherAPIKey is the key of OtherProject, which may not see Project.
	OtherAPIKey  = "metalsim-other-token"
	OtherProject = "d5a2c0de-0000-4000-8000-000000000002"

	// VRF has the ranges 10.60.0.0/22 and 10.61.0.0/24.
	VRF = "d5a2c0de-0000-4000-8000-0000000000a1"
	// NodesReservation is 10.60.1.0/29, served by NodesGateway (10.60.1.1)
	// on NodesVLAN.
	NodesReservation = "d5a2c0de-0000-4000-8000-0000000000b1"
	// LBReservation is 10.61.0.0/28, served by LBGateway (10.61.0.1) on
	// LBVLAN.
	LBReservation = "d5a2c0de-0000-4000-8000-0000000000b2"

	// NodesVLAN is VXLAN 1001 in da.
	NodesVLAN = "d5a2c0de-0000-4000-8000-0000000000c1"
	// LBVLAN is VXLAN 1002 in da.
	LBVLAN = "d5a2c0de-0000-4000-8000-0000000000c2"
	// PlainVLAN is VXLAN 1003 in da, served by no gateway.
	PlainVLAN = "d5a2c0de-0000-4000-8000-0000000000c3"
	// NewYorkVLAN is VXLAN 1001 in ny: the same VXLAN as NodesVLAN, in
	// another metro.
	NewYorkVLAN = "d5a2c0de-0000-4000-8000-0000000000c4"
	// NodesVXLAN is the VXLAN of NodesVLAN and NewYorkVLAN.
	NodesVXLAN = 1001

	NodesGateway = "d5a2c0de-0000-4000-8000-0000000000d1"
	LBGateway    = "d5a2c0de-0000-4000-8000-0000000000d2"

	// HardwareReservation1 and HardwareReservation2 are provisionable
	// servers of plan ReservedPlan in facility ReservedFacility.
	HardwareReservation1 = "d5a2c0de-0000-4000-8000-0000000000e1"
	HardwareReservation2 = "d5a2c0de-0000-4000-8000-0000000000e2"
	ReservedPlan         = "c3.small.x86"
	ReservedFacility     = "da11"
)

// Sim is a seeded simulator served over HTTP.
type Sim struct {
	*sim.Server
	// URL is the base URL of the server, what metal.Config.BaseURL takes.
	URL string
	srv *httptest.Server
}

// Close stops serving.
func (s *Sim) Close() { s.srv.Close() }

// New returns a simulator built from opts and seeded with the example world,
// after edit (when not nil) has changed it. Start serves one; New is for
// callers that serve it themselves, e.g. behind a handler that swaps
// simulators.
func New(opts sim.Options, edit func(*sim.SeedFile)) (*sim.Server, error) {
	s := sim.New(opts)
	seed := sim.ExampleSeed()
	if edit != nil {
		edit(seed)
	}
	if err := s.Seed(seed); err != nil {
		return nil, err
	}
	return s, nil
}

// Start serves New(opts, edit) on a loopback port. It takes no testing.TB so
// that Ginkgo suites and commands can use it too: call Close when done.
func Start(opts sim.Options, edit func(*sim.SeedFile)) (*Sim, error) {
	s, err := New(opts, edit)
	if err != nil {
		return nil, err
	}
	srv := httptest.NewServer(s)
	return &Sim{Server: s, URL: srv.URL, srv: srv}, nil
}
