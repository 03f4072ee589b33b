package sim

import (
	_ "embed"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	"sigs.k8s.io/yaml"
)

// SeedFile is a world for the simulator to start from, written in YAML or
// JSON (see testdata/example-seed.yaml). Objects may give stable IDs so that
// tests and documentation can refer to them; they get UUIDs otherwise.
// References between objects are by ID.
type SeedFile struct {
	Projects []SeedProject `json:"projects"`
}

// SeedProject is a project and everything in it.
type SeedProject struct {
	ID   string `json:"id,omitempty"`
	Name string `json:"name"`
	// APIKeys are tokens valid for this project only.
	APIKeys         []string             `json:"apiKeys,omitempty"`
	VRFs            []SeedVRF            `json:"vrfs,omitempty"`
	VirtualNetworks []SeedVirtualNetwork `json:"virtualNetworks,omitempty"`
	IPReservations  []SeedIPReservation  `json:"ipReservations,omitempty"`
	MetalGateways   []SeedMetalGateway   `json:"metalGateways,omitempty"`
	Devices         []SeedDevice         `json:"devices,omitempty"`
	// HardwareReservations are provisionable: seeded devices do not take
	// them.
	HardwareReservations []SeedHardwareReservation `json:"hardwareReservations,omitempty"`
}

// SeedHardwareReservation is a server reserved for the project. Facility is
// a facility code of the metro (e.g. da11), the metro code followed by 1 when
// empty.
type SeedHardwareReservation struct {
	ID       string `json:"id,omitempty"`
	Plan     string `json:"plan"`
	Metro    string `json:"metro"`
	Facility string `json:"facility,omitempty"`
}

// SeedVRF is a VRF. IPv4 ranges are /8 to /29; at most one IPv6 range,
// /59 to /64; at most 8 VRFs per project.
type SeedVRF struct {
	ID          string   `json:"id,omitempty"`
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Metro       string   `json:"metro"`
	LocalASN    int64    `json:"localASN,omitempty"`
	IPRanges    []string `json:"ipRanges"`
	Tags        []string `json:"tags,omitempty"`
}

// SeedVirtualNetwork is a VLAN; its vxlan is unique in its metro.
type SeedVirtualNetwork struct {
	ID          string   `json:"id,omitempty"`
	VXLAN       int32    `json:"vxlan"`
	Metro       string   `json:"metro"`
	Description string   `json:"description,omitempty"`
	Tags        []string `json:"tags,omitempty"`
}

// SeedIPReservation is a VRF IP reservation of the VRF with ID VRF: network
// and cidr as the API takes them.
type SeedIPReservation struct {
	ID      string   `json:"id,omitempty"`
	VRF     string   `json:"vrf"`
	Network string   `json:"network"`
	CIDR    int      `json:"cidr"`
	Tags    []string `json:"tags,omitempty"`
	Details string   `json:"details,omitempty"`
}

// SeedMetalGateway is a VRF Metal Gateway serving the reservation with ID
// IPReservation on the VLAN with ID VirtualNetwork (in the VRF's metro).
type SeedMetalGateway struct {
	ID             string `json:"id,omitempty"`
	IPReservation  string `json:"ipReservation"`
	VirtualNetwork string `json:"virtualNetwork"`
	// State is ready (the default), active or deleting.
	State string `json:"state,omitempty"`
}

// SeedDevice is a device that already exists, Layer 3 with its ports bonded.
type SeedDevice struct {
	ID              string   `json:"id,omitempty"`
	Hostname        string   `json:"hostname"`
	Plan            string   `json:"plan"`
	Metro           string   `json:"metro"`
	OperatingSystem string   `json:"operatingSystem"`
	Tags            []string `json:"tags,omitempty"`
	Userdata        string   `json:"userdata,omitempty"`
	// State is active by default.
	State string `json:"state,omitempty"`
}

// LoadSeed reads a seed file, YAML or JSON. Unknown fields are errors, so
// that a misspelt key does not silently seed less than intended.
func LoadSeed(path string) (*SeedFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseSeed(path, data)
}

func parseSeed(name string, data []byte) (*SeedFile, error) {
	var f SeedFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("seed %s: %w", name, err)
	}
	return &f, nil
}

//go:embed testdata/example-seed.yaml
var exampleSeed []byte

// ExampleSeed returns the example world (testdata/example-seed.yaml, built
// into the package so that no caller needs its path), a fresh copy on every
// call so that callers may edit it before seeding. Package simtest names its
// IDs.
func ExampleSeed() *SeedFile {
	f, err := parseSeed("example-seed.yaml", exampleSeed)
	if err != nil {
		panic(err) // the file is part of the package and tested
	}
	return f
}

// Seed adds the seed's objects to the simulator, checked by the same rules as
// the API applies. It is all or nothing: on error the simulator is unchanged.
func (s *Server) Seed(f *SeedFile) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.world.clone()
	now := s.clock.Now()
	for i := range f.Projects {
		if err := w.seedProject(&f.Projects[i], now); err != nil {
			return fmt.Errorf("seed: project %q: %w", f.Projects[i].Name, err)
		}
	}
	s.world = w
	return nil
}

func (w *world) seedProject(sp *SeedProject, now time.Time) error {
	if sp.Name == "" {
		return errors.New("a project needs a name")
	}
	p := &project{record: record{id: sp.ID}, name: sp.Name}
	if err := store(w, w.projects, p, now); err != nil {
		return err
	}
	p.projectID = p.id
	for _, key := range sp.APIKeys {
		if key == "" {
			return errors.New("an API key is empty")
		}
		if _, taken := w.keys[key]; taken {
			return errors.New("an API key is given to two projects")
		}
		w.keys[key] = p.id
	}
	for _, sv := range sp.VRFs {
		if err := w.seedVRF(p.id, sv, now); err != nil {
			return fmt.Errorf("VRF %q: %w", sv.Name, err)
		}
	}
	for _, sn := range sp.VirtualNetworks {
		vn := &virtualNetwork{record: record{id: sn.ID, projectID: p.id}, vxlan: sn.VXLAN, metro: sn.Metro, description: sn.Description, tags: sn.Tags}
		if err := w.addVirtualNetwork(vn, now); err != nil {
			return fmt.Errorf("VLAN %d: %w", sn.VXLAN, err)
		}
	}
	for _, sr := range sp.IPReservations {
		if err := w.seedReservation(p.id, sr, now); err != nil {
			return fmt.Errorf("IP reservation %s/%d: %w", sr.Network, sr.CIDR, err)
		}
	}
	for _, sg := range sp.MetalGateways {
		g := &gateway{record: record{id: sg.ID, projectID: p.id}, reservationID: sg.IPReservation, vlanID: sg.VirtualNetwork, state: metalv1.MetalGatewayState(sg.State)}
		if err := w.addGateway(g, now); err != nil {
			return fmt.Errorf("the Metal Gateway of %s: %w", sg.IPReservation, err)
		}
	}
	for _, sh := range sp.HardwareReservations {
		if err := w.seedHardwareReservation(p.id, sh, now); err != nil {
			return fmt.Errorf("hardware reservation %q: %w", sh.ID, err)
		}
	}
	for _, sd := range sp.Devices {
		if err := w.seedDevice(p.id, sd, now); err != nil {
			return fmt.Errorf("device %q: %w", sd.Hostname, err)
		}
	}
	return nil
}

func (w *world) seedVRF(projectID string, sv SeedVRF, now time.Time) error {
	v := &vrf{
		record:      record{id: sv.ID, projectID: projectID},
		name:        sv.Name,
		description: sv.Description,
		metro:       sv.Metro,
		localASN:    sv.LocalASN,
		tags:        sv.Tags,
	}
	for _, r := range sv.IPRanges {
		p, err := netip.ParsePrefix(r)
		if err != nil {
			return err
		}
		v.ranges = append(v.ranges, p)
	}
	return w.addVRF(v, now)
}

func (w *world) seedReservation(projectID string, sr SeedIPReservation, now time.Time) error {
	prefix, err := reservationPrefix(sr.Network, sr.CIDR)
	if err != nil {
		return err
	}
	return w.addReservation(&reservation{
		record:  record{id: sr.ID, projectID: projectID},
		vrfID:   sr.VRF,
		prefix:  prefix,
		tags:    sr.Tags,
		details: sr.Details,
	}, now)
}

func (w *world) seedHardwareReservation(projectID string, sh SeedHardwareReservation, now time.Time) error {
	if err := checkMetro(sh.Metro); err != nil {
		return err
	}
	facility := sh.Facility
	if facility == "" {
		facility = metroFacility(sh.Metro)
	}
	if err := checkFacility(facility); err != nil {
		return err
	}
	if facilityMetro(facility) != sh.Metro {
		return fmt.Errorf("facility %s is not in metro %s", facility, sh.Metro)
	}
	return w.addHardwareReservation(&hardwareReservation{
		record:   record{id: sh.ID, projectID: projectID},
		plan:     sh.Plan,
		facility: facility,
	}, now)
}

func (w *world) seedDevice(projectID string, sd SeedDevice, now time.Time) error {
	state := metalv1.DEVICESTATE_ACTIVE
	if sd.State != "" {
		state = metalv1.DeviceState(sd.State)
	}
	return w.addDevice(&device{
		record:          record{id: sd.ID, projectID: projectID},
		hostname:        sd.Hostname,
		plan:            sd.Plan,
		metro:           sd.Metro,
		operatingSystem: sd.OperatingSystem,
		billingCycle:    string(metalv1.DEVICECREATEINPUTBILLINGCYCLE_HOURLY),
		tags:            sd.Tags,
		userdata:        sd.Userdata,
		state:           state,
	}, now)
}
