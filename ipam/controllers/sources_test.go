package controllers

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// The example seed: VRF a1 with ranges 10.60.0.0/22 and 10.61.0.0/24, and
// gateway subnets b1 10.60.1.0/29 and b2 10.61.0.0/28; b3 is added below
// without a gateway, and an IPv6 range with a gateway subnet of its own.
const (
	testProject = simtest.Project
	testVRF     = simtest.VRF
	testRes1    = simtest.NodesReservation
	testRes2    = simtest.LBReservation
	testRes3    = "d5a2c0de-0000-4000-8000-0000000000b3"
	testRes6    = "d5a2c0de-0000-4000-8000-0000000000b6"
)

func simClient(t *testing.T) *metal.Client {
	t.Helper()
	s, err := simtest.Start(sim.Options{}, func(seed *sim.SeedFile) {
		p := &seed.Projects[0]
		p.VRFs[0].IPRanges = append(p.VRFs[0].IPRanges, "fd00:60::/64")
		p.IPReservations = append(p.IPReservations,
			sim.SeedIPReservation{ID: testRes3, VRF: testVRF, Network: "10.60.2.0", CIDR: 29},
			sim.SeedIPReservation{ID: testRes6, VRF: testVRF, Network: "fd00:60::", CIDR: 64})
		p.MetalGateways = append(p.MetalGateways, sim.SeedMetalGateway{IPReservation: testRes6, VirtualNetwork: simtest.PlainVLAN})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c, err := metal.NewClient(metal.Config{APIKey: simtest.APIKey, BaseURL: s.URL, Retry: metal.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func subnetEntry(res, address, gateway string, bits int32, only bool) v1alpha1.ResolvedAddresses {
	return v1alpha1.ResolvedAddresses{
		Address: address, Prefix: ptr.To(bits), Gateway: gateway,
		Source: "vrf/" + testVRF + "/reservation/" + res, SubnetOnly: only,
	}
}

func TestVRFEntries(t *testing.T) {
	b1 := subnetEntry(testRes1, "10.60.1.0/29", "10.60.1.1", 29, false)
	b2 := subnetEntry(testRes2, "10.61.0.0/28", "10.61.0.1", 28, false)
	vrfRange := func(r string) v1alpha1.ResolvedAddresses {
		return v1alpha1.ResolvedAddresses{Address: r, Source: "vrf/" + testVRF}
	}
	tests := []struct {
		name    string
		src     v1alpha1.VRFSource
		want    []v1alpha1.ResolvedAddresses
		wantErr string // a substring; empty: no error
	}{
		{
			name: "gateway subnets only, never the reservation without a gateway",
			src:  v1alpha1.VRFSource{ID: testVRF, Scope: v1alpha1.VRFScopeGatewaySubnets},
			want: []v1alpha1.ResolvedAddresses{b1, b2},
		},
		{
			name: "whole ranges, with the gateway subnets for their prefix and gateway",
			src:  v1alpha1.VRFSource{ID: testVRF, Scope: v1alpha1.VRFScopeIPRanges},
			want: []v1alpha1.ResolvedAddresses{vrfRange("10.60.0.0/22"), vrfRange("10.61.0.0/24"), b1, b2},
		},
		{
			name: "listed reservations; the others stay subnets whose gateway is reserved",
			src:  v1alpha1.VRFSource{ID: testVRF, Scope: v1alpha1.VRFScopeGatewaySubnets, ReservationIDs: []string{testRes2}},
			want: []v1alpha1.ResolvedAddresses{subnetEntry(testRes1, "10.60.1.0/29", "10.60.1.1", 29, true), b2},
		},
		{
			name: "IPv6",
			src:  v1alpha1.VRFSource{ID: testVRF, IPFamily: v1alpha1.IPv6Family, Scope: v1alpha1.VRFScopeIPRanges},
			want: []v1alpha1.ResolvedAddresses{vrfRange("fd00:60::/64"), subnetEntry(testRes6, "fd00:60::/64", "fd00:60::1", 64, false)},
		},
		{
			name:    "a listed reservation without a gateway",
			src:     v1alpha1.VRFSource{ID: testVRF, Scope: v1alpha1.VRFScopeGatewaySubnets, ReservationIDs: []string{testRes1, testRes3}},
			wantErr: "spec.vrf.reservationIDs " + testRes3 + " are not IPv4 IP reservations",
		},
		{
			name:    "project and metro checked",
			src:     v1alpha1.VRFSource{ID: testVRF, ProjectID: testProject, Metro: "ny"},
			wantErr: "is in metro da, not spec.vrf.metro ny",
		},
		{
			name:    "another project",
			src:     v1alpha1.VRFSource{ID: testVRF, ProjectID: "other"},
			wantErr: "belongs to project " + testProject + ", not spec.vrf.projectID other",
		},
		{
			name:    "unknown VRF",
			src:     v1alpha1.VRFSource{ID: "nope"},
			wantErr: "404",
		},
	}
	api := simClient(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got, err := vrfEntries(context.Background(), api, &tt.src)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("vrfEntries() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("vrfEntries() =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// TestQualifiedProject: the project a pool's VRF resolved to names its
// allocation domain, so a VRF read from any endpoint but the public API is
// kept apart from the same IDs read elsewhere; the public API's keep the
// key they always had, so existing allocation records stay theirs.
func TestQualifiedProject(t *testing.T) {
	for _, tt := range []struct{ endpoint, want string }{
		{"https://api.equinix.com/metal/v1", "p-1"},
		{"http://127.0.0.1:4000/metal/v1", "p-1@http://127.0.0.1:4000/metal/v1"},
		{"http://127.0.0.1:4001/metal/v1", "p-1@http://127.0.0.1:4001/metal/v1"},
	} {
		if got := qualifiedProject("p-1", tt.endpoint); got != tt.want {
			t.Errorf("qualifiedProject(p-1, %s) = %s, want %s", tt.endpoint, got, tt.want)
		}
	}
}
