package device

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Device states of the platform that the plan distinguishes.
const (
	StateQueued         = "queued"
	StateProvisioning   = "provisioning"
	StateActive         = "active"
	StateFailed         = "failed"
	StateDeprovisioning = "deprovisioning"
)

// InCreation reports whether a device in state is still being created:
// queued or provisioning. A device powered off, on or reinstalled by its
// owner is not, whatever it waits for.
func InCreation(state string) bool {
	return state == StateQueued || state == StateProvisioning
}

// EventProvisionStarted is the type of the provisioning event the platform
// logs when a device starts provisioning, past its queue.
const EventProvisionStarted = "provisioning.101"

// Batch states of the platform.
const (
	BatchQueued     = "queued"
	BatchInProgress = "in_progress"
	BatchCompleted  = "completed"
	BatchFailed     = "failed"
)

// Spec is what a machine wants of the platform, built by the controller
// from what it found before planning.
type Spec struct {
	// ProviderID is the machine's spec.providerID, "" until its device
	// exists. A machine that has one and whose device the platform no
	// longer has lost it: another is never created behind the same ID.
	ProviderID string
	// MayCreate: a device may be created now. Its place is known and a
	// creation slot is held; it is only ever set for a machine whose lookup
	// by its tag found no device, or that never asked for one, so that no
	// machine gets two.
	MayCreate bool
	// VLANsMissing: a network's VLAN does not exist in the metro the device
	// is in, or would be created in. No device is created and no port is
	// sent a batch until it does: a device that cannot carry its networks
	// is wasted.
	VLANsMissing bool
	// Ports in the machine's order, their VLANs resolved in the device's
	// metro; the plan works through them in it.
	Ports []PortSpec
}

// PortSpec is a port and the VLANs it must carry.
type PortSpec struct {
	// Name is the platform's name of the port: bond0, eth1, ...
	Name string
	// Unbonded takes the port out of bond0 before it gets its VLANs (the
	// hybrid unbonded mode).
	Unbonded bool
	// VLANs the port carries, tagged.
	VLANs []VLAN
}

// VLAN is a virtual network of the platform.
type VLAN struct {
	// ID is the virtual network's UUID.
	ID string
	// VXLAN is its 802.1Q tag.
	VXLAN int32
}

// Device is a device as the platform shows it.
type Device struct {
	ID       string
	State    string
	Metro    string
	Project  string
	Hostname string
	Tags     []string
	// Addresses are the device's own, in the platform's order.
	Addresses []Address
	CreatedAt time.Time
	// ProvisioningSince is when a device in creation started provisioning
	// (its EventProvisionStarted), zero when it has not or it is not told;
	// ProvisioningPercent is the provisioning_percentage it reports, 0 for
	// none. The provisioning polls follow them.
	ProvisioningSince   time.Time
	ProvisioningPercent float64
	// Ports by name.
	Ports map[string]Port
}

// Address is one of the device's own IP addresses.
type Address struct {
	Address string
	Public  bool
}

// Port is one of a device's ports.
type Port struct {
	ID   string
	Name string
	// Bonded is true for a NIC inside bond0.
	Bonded bool
	// VLANs are the IDs of the virtual networks the port carries.
	VLANs []string
	// Batch is the port's newest VLAN assignment batch; nil when the port
	// has none or it was not read (a port that carries its VLANs needs no
	// batch, so it is not read).
	Batch *Batch
}

// Batch is a VLAN assignment batch of a port.
type Batch struct {
	ID     string
	State  string
	Errors []string
}

// Action is what a step does.
type Action int

const (
	// Create the device.
	Create Action = iota
	// WaitCreate: the platform has no device and one may not be created
	// yet (its place unknown, a VLAN missing, no creation slot); the
	// controller's facts say which.
	WaitCreate
	// WaitDevice: the device is provisioning.
	WaitDevice
	// WaitVLANs: the device is active, but its metro lacks a network's
	// VLAN.
	WaitVLANs
	// Disbond takes Step.Port out of bond0.
	Disbond
	// AssignVLANs sends one batch giving Step.Port the VLANs Step.VLANs.
	AssignVLANs
	// WaitBatch: Step.Port's batch Step.Batch is queued or in progress.
	WaitBatch
	// Fail: the machine cannot go on; Step.Reason and Step.Message say why.
	Fail
	// Delete the device.
	Delete
	// WaitGone: the device is being deprovisioned.
	WaitGone
	// Done: nothing left to do.
	Done
)

var actionNames = [...]string{"Create", "WaitCreate", "WaitDevice", "WaitVLANs", "Disbond", "AssignVLANs", "WaitBatch", "Fail", "Delete", "WaitGone", "Done"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Reasons of a Fail step.
const (
	// ReasonDeviceFailed: the platform failed to provision the device.
	ReasonDeviceFailed = "DeviceFailed"
	// ReasonDeviceDeleted: the device is being deleted by someone else.
	ReasonDeviceDeleted = "DeviceDeleted"
	// ReasonDeviceGone: the device the machine has on record no longer
	// exists.
	ReasonDeviceGone = "DeviceGone"
	// ReasonPortNotFound: the device has no port of that name.
	ReasonPortNotFound = "PortNotFound"
	// ReasonVLANAttachFailed: the platform failed the port's batch.
	ReasonVLANAttachFailed = "VLANAttachFailed"
)

// Step is the next thing to do for a machine.
type Step struct {
	Action Action
	// Port is the port the step is about, for Disbond, AssignVLANs,
	// WaitBatch and port failures.
	Port string
	// VLANs for AssignVLANs: the ones the port lacks.
	VLANs []VLAN
	// Batch waited for by WaitBatch.
	Batch string
	// Reason and Message explain a Fail step.
	Reason, Message string
}

// OnPorts reports whether the step is about the ports of an active device
// (VLANsAttached) rather than about the device itself (DeviceReady).
func (s Step) OnPorts() bool {
	switch s.Action {
	case WaitVLANs, Disbond, AssignVLANs, WaitBatch, Done:
		return true
	case Fail:
		return s.Port != ""
	}
	return false
}

// Plan returns the next step that brings the machine's device (nil when
// the platform has none for it) to spec: create it when it may be, wait for
// it, then bring its ports up one at a time in spec order, so that a
// failure names the first port that failed.
func Plan(spec Spec, d *Device) Step {
	switch {
	case d == nil:
		return planCreate(spec)
	case d.State == StateFailed:
		return Step{Action: Fail, Reason: ReasonDeviceFailed, Message: fmt.Sprintf("device %s failed to provision", d.ID)}
	case d.State == StateDeprovisioning:
		return Step{Action: Fail, Reason: ReasonDeviceDeleted, Message: fmt.Sprintf("device %s is being deleted outside Cluster API: delete the Machine to replace it", d.ID)}
	case d.State != StateActive:
		return Step{Action: WaitDevice}
	case spec.VLANsMissing:
		return Step{Action: WaitVLANs}
	}
	return planPorts(spec, d)
}

// planCreate is the step of a machine the platform has no device for.
func planCreate(spec Spec) Step {
	switch {
	case spec.ProviderID != "":
		return Step{Action: Fail, Reason: ReasonDeviceGone,
			Message: fmt.Sprintf("device %s no longer exists: delete the Machine to replace it", DeviceID(spec.ProviderID))}
	case spec.VLANsMissing || !spec.MayCreate:
		return Step{Action: WaitCreate}
	}
	return Step{Action: Create}
}

// planPorts is the step of an active device's ports.
func planPorts(spec Spec, d *Device) Step {
	for _, want := range spec.Ports {
		p, ok := d.Ports[want.Name]
		if !ok {
			return Step{Action: Fail, Port: want.Name, Reason: ReasonPortNotFound,
				Message: fmt.Sprintf("device %s has no port %s (it has %s)", d.ID, want.Name, strings.Join(portNames(d), ", "))}
		}
		missing := Missing(want, p)
		if len(missing) == 0 && (!want.Unbonded || !p.Bonded) {
			continue
		}
		switch {
		case want.Unbonded && p.Bonded:
			return Step{Action: Disbond, Port: want.Name}
		case p.Batch != nil && (p.Batch.State == BatchQueued || p.Batch.State == BatchInProgress):
			return Step{Action: WaitBatch, Port: want.Name, Batch: p.Batch.ID}
		case p.Batch != nil && p.Batch.State == BatchFailed:
			msg := fmt.Sprintf("VLAN assignment batch %s of port %s failed", p.Batch.ID, want.Name)
			if len(p.Batch.Errors) > 0 {
				msg += ": " + strings.Join(p.Batch.Errors, "; ")
			}
			return Step{Action: Fail, Port: want.Name, Reason: ReasonVLANAttachFailed, Message: msg}
		default:
			return Step{Action: AssignVLANs, Port: want.Name, VLANs: missing}
		}
	}
	return Step{Action: Done}
}

// Missing are the VLANs of want that port p does not carry yet.
func Missing(want PortSpec, p Port) []VLAN {
	var out []VLAN
	for _, v := range want.VLANs {
		if !slices.Contains(p.VLANs, v.ID) {
			out = append(out, v)
		}
	}
	return out
}

// PlanDelete returns the next step of deleting the device: delete it, wait
// for the platform to finish, or done once it is gone.
func PlanDelete(d *Device) Step {
	switch {
	case d == nil:
		return Step{Action: Done}
	case d.State == StateDeprovisioning:
		return Step{Action: WaitGone}
	default:
		return Step{Action: Delete}
	}
}

func portNames(d *Device) []string {
	names := make([]string, 0, len(d.Ports))
	for name := range d.Ports {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
