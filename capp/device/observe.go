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

// API is the part of the Metal API machines and clusters use: *metal.Client
// has it.
type API interface {
	CreateDevice(ctx context.Context, req metal.DeviceRequest) (*metalv1.Device, error)
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
	ListPublicIPv4Reservations(ctx context.Context, tag string) ([]metalv1.IPReservation, error)
	ReservePublicIPv4(ctx context.Context, metro string, tags []string) (*metalv1.IPReservation, error)
	DeleteIPReservation(ctx context.Context, id string) error
}

var _ API = (*metal.Client)(nil)

// Executor reads a machine's device into plain types and carries out the
// steps Plan returns. It keeps no state between calls but the VLAN list it
// shares with the other machines of the project.
type Executor struct {
	API API
	// VLANs, when set, shares the project's VLAN list between machines
	// for a short while, under VLANKey (the credentials and the project:
	// a list read with one tenant's credentials is never another's).
	VLANs   *VLANCache
	VLANKey any
}

// ErrAmbiguous: more than one device carries a machine's identifying tag.
// Something other than this provider created one; no device is created or
// deleted until a person sorts it out.
var ErrAmbiguous = errors.New("more than one device carries the machine's tag")

// Find returns the machine's device, proven owner's (Owned) before
// anything else is done with it: by its ID once known, else by the
// machine's identifying tag (one filtered lookup), which is how a device
// whose creation was never recorded is adopted instead of created twice.
// nil means the platform has no device for the machine; a device that is
// not owner's is a *NotOwnedError.
func (x Executor) Find(ctx context.Context, id string, owner Owner) (*Device, error) {
	if id != "" {
		d, err := x.API.GetDevice(ctx, id)
		if metal.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		dev := fromAPI(d)
		return dev, Owned("device", dev.ID, dev.Project, dev.Tags, MachineTagPrefix, owner)
	}
	tag := MachineTagPrefix + owner.UID
	list, err := x.API.ListDevices(ctx, metal.DeviceFilter{Tag: tag})
	if err != nil {
		return nil, err
	}
	switch len(list) {
	case 0:
		return nil, nil
	case 1:
		dev := fromAPI(&list[0])
		return dev, Owned("device", dev.ID, dev.Project, dev.Tags, MachineTagPrefix, owner)
	}
	ids := make([]string, len(list))
	for i := range list {
		ids[i] = list[i].GetId()
	}
	return nil, fmt.Errorf("%w %q: %s", ErrAmbiguous, tag, strings.Join(ids, ", "))
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

func fromAPI(d *metalv1.Device) *Device {
	metro := d.GetMetro()
	project := d.GetProject()
	out := &Device{
		ID: d.GetId(), State: string(d.GetState()), Metro: metro.GetCode(), Project: cmp.Or(project.GetId(), hrefID(project.GetHref())),
		Hostname: d.GetHostname(), Tags: d.GetTags(), CreatedAt: d.GetCreatedAt(), Ports: map[string]Port{},
	}
	if d.GetState() == metalv1.DEVICESTATE_PROVISIONING {
		out.ProvisioningPercent = float64(d.GetProvisioningPercentage())
		for _, e := range d.GetProvisioningEvents() {
			if e.GetType() == EventProvisionStarted {
				out.ProvisioningSince = e.GetCreatedAt()
			}
		}
	}
	for _, ip := range d.GetIpAddresses() {
		if ip.GetAddress() != "" {
			out.Addresses = append(out.Addresses, Address{Address: ip.GetAddress(), Public: ip.GetPublic()})
		}
	}
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

// hrefID is the ID an API reference ends in, "" for none.
func hrefID(href string) string {
	if href == "" {
		return ""
	}
	return path.Base(href)
}

// virtualNetworkID is a port's VLAN's ID, which the API answers in full or
// as a bare reference ending in the ID.
func virtualNetworkID(vn metalv1.VirtualNetwork) string {
	return cmp.Or(vn.GetId(), hrefID(vn.GetHref()))
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
