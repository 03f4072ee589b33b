package sim_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

func TestExampleSeed(t *testing.T) {
	seed := sim.ExampleSeed()
	p := seed.Projects[0]
	if len(seed.Projects) != 2 || len(p.VRFs) != 1 || len(p.VRFs[0].IPRanges) != 2 || len(p.IPReservations) != 2 ||
		len(p.MetalGateways) != 2 || len(p.VirtualNetworks) != 4 || len(p.HardwareReservations) != 2 {
		t.Fatalf("example seed = %+v", seed)
	}
	// Each call is a fresh copy, so one caller's edits are not another's.
	seed.Projects[0].Name = "edited"
	if sim.ExampleSeed().Projects[0].Name == "edited" {
		t.Error("ExampleSeed returned a shared copy")
	}
	// The file is what bin/metalsim --seed reads.
	if fromFile, err := sim.LoadSeed("testdata/example-seed.yaml"); err != nil || !reflect.DeepEqual(fromFile, sim.ExampleSeed()) {
		t.Errorf("LoadSeed(example) = %+v, %v", fromFile, err)
	}

	api := newAPI(t, sim.Options{})
	ctx := context.Background()
	vrfs, _, err := api.sdk.VRFsApi.FindVrfs(ctx, projectID).Execute()
	if err != nil || len(vrfs.GetVrfs()) != 1 {
		t.Fatalf("seeded VRFs = %v, %v", vrfs, err)
	}
	vlans, _, err := api.sdk.VLANsApi.FindVirtualNetworks(ctx, projectID).Metro("da").Execute()
	if err != nil || len(vlans.GetVirtualNetworks()) != 3 {
		t.Fatalf("seeded VLANs in da = %v, %v", vlans, err)
	}
	ny, _, err := api.sdk.VLANsApi.GetVirtualNetwork(ctx, simtest.NewYorkVLAN).Execute()
	if err != nil || ny.GetVxlan() != simtest.NodesVXLAN || ny.GetMetroCode() != "ny" {
		t.Errorf("New York VLAN = %+v, %v", ny, err)
	}
	other := simtest.SDK(api.url, simtest.OtherAPIKey)
	if _, _, err := other.VRFsApi.FindVrfById(ctx, simtest.VRF).Execute(); err == nil {
		t.Error("the other project's key reads the demo project's VRF")
	}
	if list, _, err := other.VRFsApi.FindVrfs(ctx, simtest.OtherProject).Execute(); err != nil || len(list.GetVrfs()) != 0 {
		t.Errorf("the other project's VRFs = %v, %v", list, err)
	}
}

func TestLoadSeedJSONAndStrictness(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	seed, err := sim.LoadSeed(write("seed.json", `{"projects": [{"name": "p", "apiKeys": ["k"]}]}`))
	if err != nil || seed.Projects[0].APIKeys[0] != "k" {
		t.Errorf("JSON seed = %+v, %v", seed, err)
	}
	if _, err := sim.LoadSeed(write("typo.yaml", "projects:\n- name: p\n  apiKey: [k]\n")); err == nil {
		t.Error("a misspelt field was accepted")
	}
	if _, err := sim.LoadSeed(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing file was accepted")
	}
}

func TestSeedValidation(t *testing.T) {
	vrf := sim.SeedVRF{ID: "vrf", Name: "v", Metro: "da", IPRanges: []string{"10.0.0.0/24"}}
	for _, tc := range []struct {
		name    string
		project sim.SeedProject
		message string
	}{
		{"unnamed project", sim.SeedProject{}, "needs a name"},
		{"unknown metro", sim.SeedProject{Name: "p", VRFs: []sim.SeedVRF{{Name: "v", Metro: "zz", IPRanges: []string{"10.0.0.0/24"}}}}, `metro "zz"`},
		{"IPv4 range too small", sim.SeedProject{Name: "p", VRFs: []sim.SeedVRF{{Name: "v", Metro: "da", IPRanges: []string{"10.0.0.0/30"}}}}, "between /8 and /29"},
		{"two IPv6 ranges", sim.SeedProject{Name: "p", VRFs: []sim.SeedVRF{{Name: "v", Metro: "da", IPRanges: []string{"2001:db8::/64", "2001:db8:1::/64"}}}}, "at most one IPv6"},
		{"overlapping ranges", sim.SeedProject{Name: "p", VRFs: []sim.SeedVRF{{Name: "v", Metro: "da", IPRanges: []string{"10.0.0.0/16", "10.0.1.0/24"}}}}, "overlap"},
		{"duplicate vxlan", sim.SeedProject{Name: "p", VirtualNetworks: []sim.SeedVirtualNetwork{{VXLAN: 5, Metro: "da"}, {VXLAN: 5, Metro: "da"}}}, "already exists"},
		{"reservation outside the VRF", sim.SeedProject{Name: "p", VRFs: []sim.SeedVRF{vrf}, IPReservations: []sim.SeedIPReservation{{VRF: "vrf", Network: "10.1.0.0", CIDR: 29}}}, "not within any IP range"},
		{"overlapping reservations", sim.SeedProject{Name: "p", VRFs: []sim.SeedVRF{vrf}, IPReservations: []sim.SeedIPReservation{{VRF: "vrf", Network: "10.0.0.0", CIDR: 28}, {VRF: "vrf", Network: "10.0.0.8", CIDR: 29}}}, "overlaps"},
		{"gateway across metros", sim.SeedProject{
			Name: "p", VRFs: []sim.SeedVRF{vrf},
			VirtualNetworks: []sim.SeedVirtualNetwork{{ID: "vn", VXLAN: 5, Metro: "sv"}},
			IPReservations:  []sim.SeedIPReservation{{ID: "res", VRF: "vrf", Network: "10.0.0.0", CIDR: 29}},
			MetalGateways:   []sim.SeedMetalGateway{{IPReservation: "res", VirtualNetwork: "vn"}},
		}, "is in metro sv"},
		{"hardware reservation in an unknown facility", sim.SeedProject{Name: "p", HardwareReservations: []sim.SeedHardwareReservation{{Plan: "c3.small.x86", Metro: "da", Facility: "dallas"}}}, `facility "dallas"`},
		{"hardware reservation in another metro's facility", sim.SeedProject{Name: "p", HardwareReservations: []sim.SeedHardwareReservation{{Plan: "c3.small.x86", Metro: "da", Facility: "ny5"}}}, "not in metro da"},
		{"hardware reservation without a plan", sim.SeedProject{Name: "p", HardwareReservations: []sim.SeedHardwareReservation{{Metro: "da"}}}, "needs a plan"},
		{"ninth VRF", sim.SeedProject{Name: "p", VRFs: func() []sim.SeedVRF {
			var vrfs []sim.SeedVRF
			for i := range 9 {
				vrfs = append(vrfs, sim.SeedVRF{Name: "v", Metro: "da", IPRanges: []string{fmt.Sprintf("10.0.%d.0/24", i)}})
			}
			return vrfs
		}()}, "maximum of 8 VRFs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sim.New(sim.Options{})
			err := s.Seed(&sim.SeedFile{Projects: []sim.SeedProject{tc.project}})
			if err == nil || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("Seed error = %v, want one mentioning %q", err, tc.message)
			}
		})
	}
}

func TestSeedIsAllOrNothing(t *testing.T) {
	api := newAPI(t, sim.Options{})
	bad := &sim.SeedFile{Projects: []sim.SeedProject{
		{ID: "fresh", Name: "fine", APIKeys: []string{"fresh-key"}},
		{Name: "broken", VRFs: []sim.SeedVRF{{Name: "v", Metro: "nowhere", IPRanges: []string{"10.0.0.0/24"}}}},
	}}
	if err := api.sim.Seed(bad); err == nil {
		t.Fatal("a broken seed was accepted")
	}
	// Neither the valid first project nor its key made it in.
	if err := api.sim.Seed(&sim.SeedFile{Projects: []sim.SeedProject{{ID: "fresh", Name: "again", APIKeys: []string{"fresh-key"}}}}); err != nil {
		t.Errorf("a failed seed left state behind: %v", err)
	}
}
