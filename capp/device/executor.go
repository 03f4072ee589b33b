package device

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
)

// API is the part of the Metal API a machine uses: *metal.Client has it.
type API interface {
	EnsureDevice(ctx context.Context, req metal.DeviceRequest) (*metalv1.Device, error)
	GetDevice(ctx context.Context, id string) (*metalv1.Device, error)
	ListDevices(ctx context.Context, filter metal.DeviceFilter) ([]metalv1.Device, error)
	DeleteDevice(ctx context.Context, id string) error
	DeviceEvents(ctx context.Context, id string) ([]metalv1.Event, error)
	GetHardwareReservation(ctx context.Context, id string) (*metalv1.HardwareReservation, error)
	ListVirtualNetworks(ctx context.Context, metro string) ([]metalv1.VirtualNetwork, error)
	DisbondPort(ctx context.Context, portID string, bulk bool) (*metalv1.Port, error)
	CreateVLANAssignmentBatch(ctx context.Context, portID string, changes []metal.VLANAssignment) (*metalv1.PortVlanAssignmentBatch, error)
	ListVLANAssignmentBatches(ctx context.Context, portID string) ([]metalv1.PortVlanAssignmentBatch, error)
	GetIPReservation(ctx context.Context, id string) (*metalv1.IPReservation, error)
	AssignIPAddress(ctx context.Context, deviceID, address string) (*metalv1.IPAssignment, error)
}

var _ API = (*metal.Client)(nil)

// Executor reads a machine's device into plain types and carries out the
// steps Plan returns. It keeps no state between calls.
type Executor struct {
	API API
}

// ErrAmbiguous: more than one device carries a machine's identifying tag.
// Something other than this provider created one; no device is created or
// deleted until a person sorts it out.
var ErrAmbiguous = errors.New("more than one device carries the machine's tag")

// Find returns the machine's device: by its ID once known, else by the
// machine's identifying tag, which is how a device whose creation was never
// recorded (the manager stopped between the create call and the status
// write) is adopted instead of created twice. nil means the platform has no
// device for the machine.
func (x Executor) Find(ctx context.Context, id, tag string) (*Device, *metalv1.Device, error) {
	if id != "" {
		d, err := x.API.GetDevice(ctx, id)
		if metal.IsNotFound(err) {
			return nil, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		return fromAPI(d), d, nil
	}
	list, err := x.API.ListDevices(ctx, metal.DeviceFilter{Tag: tag})
	if err != nil {
		return nil, nil, err
	}
	switch len(list) {
	case 0:
		return nil, nil, nil
	case 1:
		return fromAPI(&list[0]), &list[0], nil
	}
	ids := make([]string, len(list))
	for i := range list {
		ids[i] = list[i].GetId()
	}
	return nil, nil, fmt.Errorf("%w %q: %s", ErrAmbiguous, tag, strings.Join(ids, ", "))
}

// ReadBatches fills in the newest batch of every port of spec that still
// lacks VLANs, so that Plan can tell a batch in flight from none sent.
func (x Executor) ReadBatches(ctx context.Context, spec Spec, d *Device) error {
	if d == nil || d.State != StateActive {
		return nil
	}
	for _, want := range spec.Ports {
		p, ok := d.Ports[want.Name]
		if !ok || len(Missing(want, p)) == 0 {
			continue
		}
		batches, err := x.API.ListVLANAssignmentBatches(ctx, p.ID)
		if err != nil {
			return err
		}
		p.Batch = newestBatch(batches)
		d.Ports[want.Name] = p
	}
	return nil
}

// Create creates the device, or adopts the one carrying req.Tag.
func (x Executor) Create(ctx context.Context, req metal.DeviceRequest) (*Device, *metalv1.Device, error) {
	d, err := x.API.EnsureDevice(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	return fromAPI(d), d, nil
}

// Run carries out a port or delete step on device d.
func (x Executor) Run(ctx context.Context, step Step, d *Device) error {
	switch step.Action {
	case Disbond:
		_, err := x.API.DisbondPort(ctx, d.Ports[step.Port].ID, false)
		return err
	case AssignVLANs:
		changes := make([]metal.VLANAssignment, len(step.VLANs))
		for i, v := range step.VLANs {
			changes[i] = metal.VLANAssignment{VLAN: v.ID}
		}
		_, err := x.API.CreateVLANAssignmentBatch(ctx, d.Ports[step.Port].ID, changes)
		return err
	case Delete:
		return x.API.DeleteDevice(ctx, d.ID)
	}
	return fmt.Errorf("device: %s is not a step to run", step.Action)
}

// Events returns the device's events as plain types.
func (x Executor) Events(ctx context.Context, id string) ([]Event, error) {
	events, err := x.API.DeviceEvents(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]Event, len(events))
	for i, e := range events {
		out[i] = Event{State: e.GetState(), Message: e.GetBody(), At: e.GetCreatedAt()}
	}
	return out, nil
}

// NextAvailable is the hardware reservation value that lets the platform pick
// any free reservation of the project.
const NextAvailable = "next-available"

// ReservationError: none of the hardware reservations asked for can take the
// device.
type ReservationError struct {
	// Asked is the preference list, in order.
	Asked []string
	// Why says, for each reservation, why it cannot be used.
	Why []string
}

func (e *ReservationError) Error() string {
	return fmt.Sprintf("no hardware reservation of %q can take the device: %s", strings.Join(e.Asked, ","), strings.Join(e.Why, "; "))
}

// PickReservation returns the first reservation of a comma-separated
// preference list that can take a device now, by reading each one (so the
// choice never depends on parsing the platform's error messages). An empty
// list or next-available is returned as it is: the platform decides.
func (x Executor) PickReservation(ctx context.Context, list string) (string, error) {
	ids := splitList(list)
	if len(ids) == 0 {
		return "", nil
	}
	if len(ids) == 1 && ids[0] == NextAvailable {
		return NextAvailable, nil
	}
	rerr := &ReservationError{Asked: ids}
	for _, id := range ids {
		hr, err := x.API.GetHardwareReservation(ctx, id)
		switch {
		case metal.IsNotFound(err):
			rerr.Why = append(rerr.Why, id+" does not exist")
		case err != nil:
			return "", err
		case !hr.GetProvisionable():
			why := id + " is not provisionable"
			if dev := hr.GetDevice(); dev.GetId() != "" {
				why = id + " is taken by device " + dev.GetId()
			}
			rerr.Why = append(rerr.Why, why)
		default:
			return id, nil
		}
	}
	return "", rerr
}

func splitList(list string) []string {
	var out []string
	for item := range strings.SplitSeq(list, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// VLANError: a network's VLAN cannot be attached to the device.
type VLANError struct {
	VXLAN int32
	// ID is the VLAN's UUID when the network names one.
	ID string
	// Metro is the device's metro.
	Metro string
	// FoundIn are the metros the VLAN exists in instead, if any.
	FoundIn []string
	// OtherVXLAN is the tag of the VLAN named by ID when it is not VXLAN.
	OtherVXLAN int32
}

func (e *VLANError) Error() string {
	name := fmt.Sprintf("VLAN %d", e.VXLAN)
	if e.ID != "" {
		name = fmt.Sprintf("VLAN %s (vxlan %d)", e.ID, e.VXLAN)
	}
	switch {
	case e.OtherVXLAN != 0:
		return fmt.Sprintf("%s: the VLAN with that id has vxlan %d", name, e.OtherVXLAN)
	case len(e.FoundIn) > 0:
		return fmt.Sprintf("%s is in metro %s, not in the device's metro %s", name, strings.Join(e.FoundIn, ", "), e.Metro)
	}
	return fmt.Sprintf("%s not found in metro %s", name, e.Metro)
}

// ResolveVLANs fills in the ID of every VLAN of spec (given by vxlan, and by
// ID where the network names one) from the project's VLANs in one read, and
// checks each is in metro. Every VLAN that cannot be used is reported.
func (x Executor) ResolveVLANs(ctx context.Context, metro string, spec Spec) (Spec, error) {
	if !slices.ContainsFunc(spec.Ports, func(p PortSpec) bool { return len(p.VLANs) > 0 }) {
		return spec, nil
	}
	all, err := x.API.ListVirtualNetworks(ctx, "")
	if err != nil {
		return Spec{}, err
	}
	out := Spec{Ports: make([]PortSpec, len(spec.Ports))}
	var errs []error
	for i, p := range spec.Ports {
		out.Ports[i] = PortSpec{Name: p.Name, Unbonded: p.Unbonded}
		for _, v := range p.VLANs {
			id, err := resolveVLAN(all, metro, v)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out.Ports[i].VLANs = append(out.Ports[i].VLANs, VLAN{ID: id, VXLAN: v.VXLAN})
		}
	}
	return out, errors.Join(errs...)
}

func resolveVLAN(all []metalv1.VirtualNetwork, metro string, v VLAN) (string, error) {
	verr := &VLANError{VXLAN: v.VXLAN, ID: v.ID, Metro: metro}
	for _, vn := range all {
		switch {
		case v.ID != "" && vn.GetId() == v.ID && vn.GetVxlan() != v.VXLAN:
			verr.OtherVXLAN = vn.GetVxlan()
			return "", verr
		case v.ID != "" && vn.GetId() != v.ID, vn.GetVxlan() != v.VXLAN:
			continue
		case strings.EqualFold(metroOf(vn), metro):
			return vn.GetId(), nil
		default:
			verr.FoundIn = append(verr.FoundIn, metroOf(vn))
		}
	}
	slices.Sort(verr.FoundIn)
	return "", verr
}

func metroOf(vn metalv1.VirtualNetwork) string {
	if code := vn.GetMetroCode(); code != "" {
		return code
	}
	m := vn.GetMetro()
	return m.GetCode()
}

// Address is one of the device's own IP addresses.
type Address struct {
	Address string
	Public  bool
}

// Addresses are the device's own addresses (public and private Layer 3),
// in the platform's order.
func Addresses(d *metalv1.Device) []Address {
	var out []Address
	for _, ip := range d.GetIpAddresses() {
		if ip.GetAddress() != "" {
			out = append(out, Address{Address: ip.GetAddress(), Public: ip.GetPublic()})
		}
	}
	return out
}

func fromAPI(d *metalv1.Device) *Device {
	metro := d.GetMetro()
	out := &Device{ID: d.GetId(), State: string(d.GetState()), Metro: metro.GetCode(), Ports: map[string]Port{}}
	for _, p := range d.GetNetworkPorts() {
		data := p.GetData()
		port := Port{ID: p.GetId(), Name: p.GetName(), Bonded: data.GetBonded() && p.GetType() != metalv1.PORTTYPE_NETWORK_BOND_PORT}
		for _, vn := range p.GetVirtualNetworks() {
			port.VLANs = append(port.VLANs, virtualNetworkID(vn))
		}
		out.Ports[port.Name] = port
	}
	return out
}

// virtualNetworkID is a port's VLAN's ID, which the API answers in full or
// as a bare reference ending in the ID.
func virtualNetworkID(vn metalv1.VirtualNetwork) string {
	if id := vn.GetId(); id != "" {
		return id
	}
	return path.Base(vn.GetHref())
}

func newestBatch(batches []metalv1.PortVlanAssignmentBatch) *Batch {
	if len(batches) == 0 {
		return nil
	}
	newest := slices.MaxFunc(batches, func(a, b metalv1.PortVlanAssignmentBatch) int {
		return cmp.Compare(a.GetCreatedAt().UnixNano(), b.GetCreatedAt().UnixNano())
	})
	return &Batch{ID: newest.GetId(), State: string(newest.GetState()), Errors: newest.GetErrorMessages()}
}

// ProviderID is the machine's providerID for a device, upstream's form.
func ProviderID(deviceID string) string { return ProviderIDPrefix + deviceID }

// ProviderIDPrefix starts every providerID of this provider.
const ProviderIDPrefix = "equinixmetal://"

// DeviceID is the device ID of a providerID, empty when it is not one of
// this provider's.
func DeviceID(providerID string) string {
	id, ok := strings.CutPrefix(providerID, ProviderIDPrefix)
	if !ok {
		return ""
	}
	return id
}

// Tags that identify a machine's device.
const (
	// MachineTagPrefix + the Machine's UID identifies a device: exactly one
	// device of the project carries it.
	MachineTagPrefix = "cluster-api-provider-packet:machine-uid:"
	// ClusterTagPrefix + the cluster name groups a cluster's devices.
	ClusterTagPrefix = "cluster-api-provider-packet:cluster-id:"
	// ControlPlaneTag and WorkerTag give a device's role.
	ControlPlaneTag = "kubernetes.io/role:control-plane"
	WorkerTag       = "kubernetes.io/role:node"
)

// Tags are the tags of a machine's device: the user's, then the identifying
// ones.
func Tags(user []string, machineUID, cluster string, controlPlane bool) []string {
	role := WorkerTag
	if controlPlane {
		role = ControlPlaneTag
	}
	return append(slices.Clone(user), MachineTagPrefix+machineUID, ClusterTagPrefix+cluster, role)
}
