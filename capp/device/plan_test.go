package device

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var (
	vlan1000 = VLAN{ID: "vn-1000", VXLAN: 1000}
	vlan1001 = VLAN{ID: "vn-1001", VXLAN: 1001}
	vlan2000 = VLAN{ID: "vn-2000", VXLAN: 2000}
)

// hybrid is a machine with two VLANs on bond0 and one on eth1 out of the bond.
var hybrid = Spec{Ports: []PortSpec{
	{Name: "bond0", VLANs: []VLAN{vlan1000, vlan1001}},
	{Name: "eth1", Unbonded: true, VLANs: []VLAN{vlan2000}},
}}

// active is a freshly provisioned device: bond0 over eth0 and eth1, no VLANs.
func active() *Device {
	return &Device{ID: "dev-1", State: StateActive, Metro: "da", Ports: map[string]Port{
		"bond0": {ID: "p-bond0", Name: "bond0"},
		"eth0":  {ID: "p-eth0", Name: "eth0", Bonded: true},
		"eth1":  {ID: "p-eth1", Name: "eth1", Bonded: true},
	}}
}

// with returns d with port name changed by f.
func with(d *Device, name string, f func(*Port)) *Device {
	p := d.Ports[name]
	f(&p)
	d.Ports[name] = p
	return d
}

func carries(ids ...string) func(*Port) { return func(p *Port) { p.VLANs = ids } }

func unbonded(p *Port) { p.Bonded = false }

func batch(state string, errs ...string) func(*Port) {
	return func(p *Port) { p.Batch = &Batch{ID: "b-" + p.Name, State: state, Errors: errs} }
}

// specWith returns hybrid changed by f.
func specWith(f func(*Spec)) Spec {
	s := hybrid
	f(&s)
	return s
}

var (
	// cleared may create its device: placed, its VLANs in the metro, a slot held.
	cleared = specWith(func(s *Spec) { s.MayCreate = true })
	// recorded has had a device: spec.providerID names it.
	recorded = specWith(func(s *Spec) { s.ProviderID = ProviderID("dev-1"); s.MayCreate = true })
	// vlansMissing wants a VLAN the device's metro lacks.
	vlansMissing = specWith(func(s *Spec) { s.VLANsMissing = true; s.MayCreate = true })
)

func TestPlan(t *testing.T) {
	bond0Done := func() *Device { return with(active(), "bond0", carries("vn-1000", "vn-1001")) }
	tests := []struct {
		name string
		spec Spec
		dev  *Device
		want Step
	}{
		{"no device, creation cleared: create it", cleared, nil, Step{Action: Create}},
		{"no device, not placed or no creation slot: wait, create nothing", hybrid, nil, Step{Action: WaitCreate}},
		{"no device, a VLAN missing in its metro: wait, create nothing even with a slot", vlansMissing, nil, Step{Action: WaitCreate}},
		{"no device behind the providerID: fail, never create another", recorded, nil,
			Step{Action: Fail, Reason: ReasonDeviceGone, Message: "device dev-1 no longer exists: delete the Machine to replace it"}},
		{"device found, creation cleared all the same: go on with it, create nothing", cleared, &Device{ID: "dev-1", State: "queued"}, Step{Action: WaitDevice}},
		{"provisioning with a VLAN missing: wait for the device first", vlansMissing, &Device{ID: "dev-1", State: "provisioning"}, Step{Action: WaitDevice}},
		{"active with a VLAN missing: wait for it, send no port anything", vlansMissing, active(), Step{Action: WaitVLANs}},
		{"queued: wait", hybrid, &Device{ID: "dev-1", State: "queued"}, Step{Action: WaitDevice}},
		{"provisioning: wait", hybrid, &Device{ID: "dev-1", State: "provisioning"}, Step{Action: WaitDevice}},
		{"failed: fail, naming the device", hybrid, &Device{ID: "dev-1", State: StateFailed},
			Step{Action: Fail, Reason: ReasonDeviceFailed, Message: "device dev-1 failed to provision"}},
		{"deprovisioning under a live machine: fail", hybrid, &Device{ID: "dev-1", State: StateDeprovisioning},
			Step{Action: Fail, Reason: ReasonDeviceDeleted, Message: "device dev-1 is being deleted outside Cluster API: delete the Machine to replace it"}},
		{"active, no networks: done", Spec{}, active(), Step{Action: Done}},
		{"active: one batch with every VLAN of bond0", hybrid, active(),
			Step{Action: AssignVLANs, Port: "bond0", VLANs: []VLAN{vlan1000, vlan1001}}},
		{"bond0 batch queued: wait for it", hybrid, with(active(), "bond0", batch(BatchQueued)),
			Step{Action: WaitBatch, Port: "bond0", Batch: "b-bond0"}},
		{"bond0 batch in progress: wait for it", hybrid, with(active(), "bond0", batch(BatchInProgress)),
			Step{Action: WaitBatch, Port: "bond0", Batch: "b-bond0"}},
		{"bond0 batch failed: fail with the platform's messages", hybrid, with(active(), "bond0", batch(BatchFailed, "VLAN 1001 is busy", "try later")),
			Step{Action: Fail, Port: "bond0", Reason: ReasonVLANAttachFailed, Message: "VLAN assignment batch b-bond0 of port bond0 failed: VLAN 1001 is busy; try later"}},
		{"bond0 partly there after a completed batch: send only what is missing", hybrid,
			with(with(active(), "bond0", carries("vn-1000")), "bond0", batch(BatchCompleted)),
			Step{Action: AssignVLANs, Port: "bond0", VLANs: []VLAN{vlan1001}}},
		{"bond0 done, eth1 still bonded: disbond it first", hybrid, bond0Done(), Step{Action: Disbond, Port: "eth1"}},
		{"eth1 out of the bond: its batch", hybrid, with(bond0Done(), "eth1", unbonded),
			Step{Action: AssignVLANs, Port: "eth1", VLANs: []VLAN{vlan2000}}},
		{"eth1 bonded with a stale batch: disbond before anything", hybrid, with(bond0Done(), "eth1", batch(BatchCompleted)),
			Step{Action: Disbond, Port: "eth1"}},
		{"every port carries its VLANs: done", hybrid,
			with(with(bond0Done(), "eth1", unbonded), "eth1", carries("vn-2000")), Step{Action: Done}},
		{"a port carrying its VLANs is never sent a batch again, whatever its old batch says", hybrid,
			with(with(with(bond0Done(), "bond0", batch(BatchFailed, "old")), "eth1", unbonded), "eth1", carries("vn-2000")), Step{Action: Done}},
		{"extra VLANs on a port are left alone", hybrid,
			with(with(with(active(), "bond0", carries("vn-9", "vn-1000", "vn-1001")), "eth1", unbonded), "eth1", carries("vn-2000")), Step{Action: Done}},
		{"a port the device does not have", Spec{Ports: []PortSpec{{Name: "eth2", Unbonded: true, VLANs: []VLAN{vlan2000}}}}, active(),
			Step{Action: Fail, Port: "eth2", Reason: ReasonPortNotFound, Message: "device dev-1 has no port eth2 (it has bond0, eth0, eth1)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Plan(tt.spec, tt.dev)); diff != "" {
				t.Errorf("Plan() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStepOnPorts(t *testing.T) {
	tests := []struct {
		name string
		step Step
		want bool
	}{
		{"creating is the device's", Step{Action: Create}, false},
		{"waiting to create is the device's", Step{Action: WaitCreate}, false},
		{"provisioning is the device's", Step{Action: WaitDevice}, false},
		{"a failed device is the device's", Step{Action: Fail, Reason: ReasonDeviceFailed}, false},
		{"a lost device is the device's", Step{Action: Fail, Reason: ReasonDeviceGone}, false},
		{"a VLAN missing at an active device is the ports'", Step{Action: WaitVLANs}, true},
		{"disbonding is the ports'", Step{Action: Disbond, Port: "eth1"}, true},
		{"a batch is the ports'", Step{Action: AssignVLANs, Port: "bond0"}, true},
		{"a batch in flight is the ports'", Step{Action: WaitBatch, Port: "bond0"}, true},
		{"a missing port is the ports'", Step{Action: Fail, Port: "eth2", Reason: ReasonPortNotFound}, true},
		{"done is the ports' last step", Step{Action: Done}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.step.OnPorts(); got != tt.want {
				t.Errorf("OnPorts() = %t, want %t", got, tt.want)
			}
		})
	}
}

func TestPlanDelete(t *testing.T) {
	tests := []struct {
		name string
		dev  *Device
		want Action
	}{
		{"gone", nil, Done},
		{"active", active(), Delete},
		{"still provisioning", &Device{ID: "dev-1", State: "provisioning"}, Delete},
		{"failed", &Device{ID: "dev-1", State: StateFailed}, Delete},
		{"deprovisioning", &Device{ID: "dev-1", State: StateDeprovisioning}, WaitGone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PlanDelete(tt.dev).Action; got != tt.want {
				t.Errorf("PlanDelete() = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestNodeReport(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	provisioned := Event{Message: "Provision complete", At: t0}
	started := Event{State: UserStateRunning, Message: "network_configuration_started", At: t0.Add(time.Minute)}
	failed := Event{State: UserStateFailed, Message: "network_configuration_failed: ifup bond0.1000", At: t0.Add(2 * time.Minute)}
	succeeded := Event{State: UserStateSucceeded, Message: "network_configuration_success", At: t0.Add(3 * time.Minute)}
	tests := []struct {
		name   string
		events []Event
		want   Report
	}{
		{"nothing", nil, Report{}},
		{"only the platform's events", []Event{provisioned}, Report{}},
		{"started", []Event{provisioned, started}, Report(started)},
		{"newest first, as the API lists them", []Event{failed, started, provisioned}, Report(failed)},
		{"a later success wins over an earlier failure", []Event{failed, succeeded, started}, Report(succeeded)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, NodeReport(tt.events)); diff != "" {
				t.Errorf("NodeReport() (-want +got):\n%s", diff)
			}
		})
	}
	if got := PlatformReason([]Event{failed, {Message: "Provisioning failed: no capacity", At: t0.Add(time.Hour)}, provisioned}); got != "Provisioning failed: no capacity" {
		t.Errorf("PlatformReason() = %q", got)
	}
}

func TestProviderID(t *testing.T) {
	if got := DeviceID(ProviderID("7c1b")); got != "7c1b" {
		t.Errorf("DeviceID(ProviderID) = %q", got)
	}
	for _, other := range []string{"", "aws:///i-1", "packet://7c1b"} {
		if got := DeviceID(other); got != "" {
			t.Errorf("DeviceID(%q) = %q, want empty", other, got)
		}
	}
}
