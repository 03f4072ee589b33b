package device

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
)

// The model test drives Plan and the Executor the way the PacketMachine
// controller does (find, resolve, read batches, plan once, act; wait by
// polling), against the simulator through the real SDK, for many random
// machines and random faults, and checks after every step what must hold
// whatever the order of events.
const (
	modelSeeds = 50
	// faultySteps: faults and out-of-band events happen only in a machine's
	// first faultySteps steps; calmSteps bounds the steps from then on to
	// Done, and again to the device gone.
	faultySteps = 30
	calmSteps   = 40
	// poll is the controller's shortest requeue: it never polls faster.
	poll = 5 * time.Second

	modelProvisionDelay   = time.Minute
	modelDeprovisionDelay = 30 * time.Second
)

// modelVXLANs are the VLANs of metro da a machine picks from: the example
// seed's three and modelExtraVXLAN, added for the model so that one port can
// want four.
var modelVXLANs = []int32{1001, 1002, 1003, modelExtraVXLAN}

const modelExtraVXLAN = 1004

// faultOps are the writes faults are injected on; the reads are left alone
// so that the model's own observations see the platform as it is.
var faultOps = []sim.Operation{sim.OpCreateDevice, sim.OpCreatePortVlanAssignmentBatch, sim.OpDisbondPort, sim.OpDeleteDevice}

func TestModel(t *testing.T) {
	for seed := range uint64(modelSeeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			newModel(t, seed).run()
		})
	}
}

// model is one machine's run: the controller's loop (x, with retries off so
// that every fault reaches the loop) and an observer (obs) that reads the
// platform between steps, with a bare SDK client (sdk) for the port calls
// the providers never make.
type model struct {
	t     *testing.T
	ctx   context.Context
	rng   *rand.Rand
	sim   *simtest.Sim
	clock *simtest.FakeClock
	x     Executor
	obs   *metal.Client
	sdk   *metalv1.APIClient
	want  Spec
	owner Owner
	tag   string
	// id is the device ID the controller recorded, empty until recorded.
	id    string
	steps int
}

func newModel(t *testing.T, seed uint64) *model {
	rng := rand.New(rand.NewPCG(seed, 0x6d6f64656c))
	clock := simtest.NewFakeClock(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC))
	s, err := simtest.Start(sim.Options{
		Clock:                  clock,
		DeviceProvisionDelay:   modelProvisionDelay,
		DeviceDeprovisionDelay: modelDeprovisionDelay,
		BatchDelay:             time.Duration(rng.IntN(30)) * time.Second,
	}, func(f *sim.SeedFile) {
		f.Projects[0].VirtualNetworks = append(f.Projects[0].VirtualNetworks, sim.SeedVirtualNetwork{VXLAN: modelExtraVXLAN, Metro: simtest.Metro})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	cfg := metal.Config{APIKey: simtest.APIKey, BaseURL: s.URL, ProjectID: simtest.Project}
	obs, err := metal.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Retry = metal.RetryPolicy{MaxAttempts: 1}
	api, err := metal.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &model{
		t: t, ctx: t.Context(), rng: rng, sim: s, clock: clock, x: Executor{API: api}, obs: obs, sdk: simtest.SDK(s.URL, simtest.APIKey),
		want:  randomSpec(rng),
		owner: Owner{Project: simtest.Project, UID: fmt.Sprintf("model-%d", seed)},
		tag:   MachineTagPrefix + fmt.Sprintf("model-%d", seed),
	}
}

// randomSpec is bond0, eth1 (out of the bond) or both, with 1-4 VLANs of
// metro da between them, each port at least one, no VLAN on two ports.
func randomSpec(rng *rand.Rand) Spec {
	ports := [][]PortSpec{
		{{Name: "bond0"}},
		{{Name: "eth1", Unbonded: true}},
		{{Name: "bond0"}, {Name: "eth1", Unbonded: true}},
	}[rng.IntN(3)]
	vxlans := slices.Clone(modelVXLANs)
	rng.Shuffle(len(vxlans), func(i, j int) { vxlans[i], vxlans[j] = vxlans[j], vxlans[i] })
	n := len(ports) + rng.IntN(len(vxlans)-len(ports)+1)
	for i, v := range vxlans[:n] {
		p := &ports[i%len(ports)]
		p.VLANs = append(p.VLANs, VLAN{VXLAN: v})
	}
	return Spec{Ports: ports}
}

func (m *model) run() {
	m.t.Logf("spec %+v", m.want)
	var step Step
	for step.Action != Done || m.steps < faultySteps {
		if m.steps == faultySteps {
			m.sim.ClearFaults()
		}
		if m.steps >= faultySteps+calmSteps {
			m.t.Fatalf("not done %d steps after the faults stopped: last step %+v", calmSteps, step)
		}
		if m.steps < faultySteps {
			m.disturb()
		}
		step = m.reconcile()
		m.steps++
		m.checkInvariants()
	}
	m.checkDone()
	id := m.id

	deleteSteps := 0
	for step = (Step{}); step.Action != Done; deleteSteps++ {
		if deleteSteps >= calmSteps {
			m.t.Fatalf("device not gone after %d delete steps: last step %+v", calmSteps, step)
		}
		if deleteSteps < faultySteps/3 {
			m.disturb()
		} else {
			m.sim.ClearFaults()
		}
		step = m.reconcileDelete()
		m.steps++
		m.checkInvariants()
	}
	if _, err := m.obs.GetDevice(m.ctx, id); !metal.IsNotFound(err) {
		m.t.Fatalf("device %s after deletion: err %v, want not found", id, err)
	}
	if list, err := m.obs.ListDevices(m.ctx, metal.DeviceFilter{Tag: m.tag}); err != nil || len(list) != 0 {
		m.t.Fatalf("devices carrying the tag after deletion: %d (err %v)", len(list), err)
	}
}

// disturb injects the random events of a step: faults on writes, time
// passing, the controller losing the device ID it had not recorded yet, and
// someone assigning one of the wanted VLANs to a port by hand.
func (m *model) disturb() {
	if m.rng.IntN(3) == 0 {
		status := []int{http.StatusServiceUnavailable, http.StatusTooManyRequests}[m.rng.IntN(2)]
		m.sim.FailNext(faultOps[m.rng.IntN(len(faultOps))], 1+m.rng.IntN(2), status, 0)
	}
	if m.rng.IntN(4) == 0 {
		m.clock.Advance(time.Duration(m.rng.IntN(40)) * time.Second)
	}
	if m.rng.IntN(8) == 0 {
		m.id = "" // the status write after the create was lost
	}
	if m.id != "" && m.rng.IntN(6) == 0 {
		m.assignByHand()
	}
}

// assignByHand assigns a wanted VLAN to a port that can carry it right now,
// so that the plan meets ports that carry part of their VLANs.
func (m *model) assignByHand() {
	d, err := m.obs.GetDevice(m.ctx, m.id)
	if err != nil || string(d.GetState()) != StateActive {
		return
	}
	dev := fromAPI(d)
	want := m.want.Ports[m.rng.IntN(len(m.want.Ports))]
	p := dev.Ports[want.Name]
	if p.Bonded {
		return // a NIC inside the bond takes no VLANs
	}
	v := want.VLANs[m.rng.IntN(len(want.VLANs))]
	if err := simtest.AssignPort(m.ctx, m.sdk, p.ID, fmt.Sprint(v.VXLAN)); err != nil {
		m.t.Fatalf("assigning VLAN %d to %s by hand: %v", v.VXLAN, want.Name, err)
	}
}

// reconcile is one pass of the controller: find the device; with an
// active one, resolve its ports' VLANs and read their batches; plan once
// (a creation is always cleared: the model has no placement or creation
// slots to wait for) and carry out the step. A wait advances the clock by
// the controller's shortest poll, and so does a create: the controller
// reads a new device back before anything else.
func (m *model) reconcile() Step {
	dev, err := m.x.Find(m.ctx, m.id, m.owner)
	if err != nil {
		m.injected(err)
		return Step{}
	}
	spec := Spec{MayCreate: true, Ports: m.want.Ports}
	if m.id != "" {
		spec.ProviderID = ProviderID(m.id)
	}
	if dev != nil && dev.State == StateActive {
		if spec, err = m.x.ResolveVLANs(m.ctx, dev.Metro, spec); err != nil {
			m.t.Fatalf("resolving the VLANs: %v", err)
		}
		if err := m.x.ReadBatches(m.ctx, spec, dev); err != nil {
			m.t.Fatalf("reading the batches: %v", err)
		}
	}
	if dev != nil {
		m.id = dev.ID
	}
	step := Plan(spec, dev)
	switch step.Action {
	case Create:
		created, err := m.x.Create(m.ctx, metal.DeviceRequest{
			Tag: m.tag, Hostname: "model", Plan: "c3.small.x86", OperatingSystem: "ubuntu_24_04", Metro: simtest.Metro,
		})
		if err != nil {
			m.injected(err)
			return step
		}
		m.id = created.ID
		m.clock.Advance(poll)
	case WaitDevice, WaitBatch:
		m.clock.Advance(poll)
	case Disbond, AssignVLANs:
		m.checkNotCarried(step, dev)
		if err := m.x.Run(m.ctx, step, dev); err != nil {
			m.injected(err)
		}
	case Done:
	default:
		m.t.Fatalf("step %d: %+v", m.steps, step)
	}
	return step
}

// reconcileDelete is one pass of the controller's deletion.
func (m *model) reconcileDelete() Step {
	dev, err := m.x.Find(m.ctx, m.id, m.owner)
	if err != nil {
		m.injected(err)
		return Step{}
	}
	step := PlanDelete(dev)
	switch step.Action {
	case Delete:
		if err := m.x.Run(m.ctx, step, dev); err != nil {
			m.injected(err)
		}
	case WaitGone:
		m.clock.Advance(poll)
	}
	return step
}

// injected fails the test unless err is one of the faults the model
// injected: anything else the platform refused is a bug of the plan.
func (m *model) injected(err error) {
	m.t.Helper()
	apiErr, ok := errors.AsType[*metal.APIError](err)
	if ok && slices.Contains(faultOps, sim.Operation(apiErr.Operation)) &&
		(apiErr.StatusCode == http.StatusServiceUnavailable || apiErr.StatusCode == http.StatusTooManyRequests) {
		return
	}
	m.t.Fatalf("step %d: %v", m.steps, err)
}

// checkNotCarried: a port is never sent a batch for a VLAN it carries, as
// the platform shows it now, nor disbonded twice.
func (m *model) checkNotCarried(step Step, dev *Device) {
	p, err := simtest.Port(m.ctx, m.sdk, dev.Ports[step.Port].ID)
	if err != nil {
		m.t.Fatal(err)
	}
	if step.Action == Disbond {
		if data := p.GetData(); !data.GetBonded() {
			m.t.Fatalf("step %d: disbonding %s, which is out of the bond", m.steps, step.Port)
		}
		return
	}
	for _, vn := range p.GetVirtualNetworks() {
		for _, v := range step.VLANs {
			if vn.GetId() == v.ID {
				m.t.Fatalf("step %d: sending %s VLAN %d, which it carries", m.steps, step.Port, v.VXLAN)
			}
		}
	}
}

// checkInvariants: at most one device carries the machine's tag, and no
// port has more than one batch queued or in progress.
func (m *model) checkInvariants() {
	m.t.Helper()
	list, err := m.obs.ListDevices(m.ctx, metal.DeviceFilter{Tag: m.tag})
	if err != nil {
		m.t.Fatal(err)
	}
	if len(list) > 1 {
		m.t.Fatalf("step %d: %d devices carry the machine's tag", m.steps, len(list))
	}
	for _, d := range list {
		for _, p := range d.GetNetworkPorts() {
			batches, err := m.obs.ListVLANAssignmentBatches(m.ctx, p.GetId())
			if err != nil {
				m.t.Fatal(err)
			}
			pending := 0
			for _, b := range batches {
				if s := string(b.GetState()); s == BatchQueued || s == BatchInProgress {
					pending++
				}
			}
			if pending > 1 {
				m.t.Fatalf("step %d: port %s has %d batches in flight", m.steps, p.GetName(), pending)
			}
		}
	}
}

// checkDone: every port of the spec carries exactly its VLANs, the
// unbonded ones are out of the bond, and the ports the spec leaves out are
// untouched.
func (m *model) checkDone() {
	m.t.Helper()
	d, err := m.obs.GetDevice(m.ctx, m.id)
	if err != nil {
		m.t.Fatal(err)
	}
	spec, err := m.x.ResolveVLANs(m.ctx, simtest.Metro, m.want)
	if err != nil {
		m.t.Fatal(err)
	}
	dev := fromAPI(d)
	for name, p := range dev.Ports {
		var want []string
		unbonded := false
		for _, ps := range spec.Ports {
			if ps.Name == name {
				for _, v := range ps.VLANs {
					want = append(want, v.ID)
				}
				unbonded = ps.Unbonded
			}
		}
		got := slices.Clone(p.VLANs)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			m.t.Errorf("port %s carries %v, want %v", name, got, want)
		}
		if name != "bond0" && p.Bonded == unbonded {
			m.t.Errorf("port %s: bonded %t, want %t", name, p.Bonded, !unbonded)
		}
	}
}
