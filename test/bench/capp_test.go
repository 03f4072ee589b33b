package bench

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// The CAPP benchmarks run the real CAPP manager against a real API server
// and the Metal API simulator, through the real SDK:
//
//   - BenchmarkMachineAPICalls: the Metal API calls one PacketMachine costs,
//     by operation, from its creation until VLANsAttached is True and then
//     until its device is gone; and, against the same simulator, the calls
//     of attaching the same VLANs one assign call at a time, the way the
//     unmerged upstream Layer 2 change does (a list of the project's VLANs,
//     a get of the port and an assign per VLAN). Writes per machine must not
//     grow with the number of VLANs: one create, and per port at most one
//     disbond and one batch.
//   - BenchmarkProvisionBurst: burstMachines PacketMachines created at once
//     in a project that already holds burstForeignDevices devices of
//     another team, against a simulator that answers every call after
//     burstLatency, takes burstProvision to provision a device and refuses
//     (429) creations beyond burstInFlight in flight; the manager runs with
//     its default --max-device-creations; each node reports its network
//     configured as soon as its device is active. Reports the seconds until
//     every machine is provisioned, the 429s the simulator answered (target
//     0: the manager's own limit keeps it under the platform's) and the
//     Metal requests per machine.
const (
	burstMachines       = 200
	burstForeignDevices = 1000
	burstLatency        = 50 * time.Millisecond
	burstProvision      = time.Minute
	burstInFlight       = 5
	// burstPoll is how often the burst reads its machines.
	burstPoll = 500 * time.Millisecond

	// capiTimeout guards against a stuck manager; it is not a speed target.
	capiTimeout = 30 * time.Minute
)

// cappEnv is an API server with the CAPP CRDs, the CAPP manager using a
// simulator's credentials from its environment, and one namespace with a
// Cluster and its PacketCluster in the simulator's project and metro.
type cappEnv struct {
	k8s  client.Client
	ns   string
	stop func()
}

func startCAPP(b *testing.B, metalSim *simtest.Sim) *cappEnv {
	b.Helper()
	ctx := context.Background()
	env, err := testenv.Start(testenv.Options{CAPPCRDs: true})
	if err != nil {
		b.Fatal(err)
	}
	// concurrency is also the manager's default --concurrency; the other
	// options keep their defaults (--max-device-creations, the Metal
	// client's retries), and the manager logs where setup sends logs.
	opts := env.CAPPOptions(concurrency, "")
	opts.Getenv = func(name string) string {
		return map[string]string{metal.EnvAPIKey: simtest.APIKey, metal.EnvBaseURL: metalSim.URL}[name]
	}
	stopManager, err := env.StartCAPP(ctx, opts)
	if err != nil {
		_ = env.Stop()
		b.Fatal(err)
	}
	e := &cappEnv{k8s: env.Client, stop: func() { stopManager(); _ = env.Stop() }}
	b.Cleanup(e.stop)
	if e.ns, err = env.NewNamespace(ctx, "capp"); err != nil {
		b.Fatal(err)
	}
	pc := &infrav1.PacketCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "cluster", Labels: map[string]string{clusterv1.ClusterNameLabel: "cluster"}},
		Spec:       infrav1.PacketClusterSpec{ProjectID: simtest.Project, Metro: simtest.Metro},
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "cluster"},
		Spec: clusterv1.ClusterSpec{Paused: ptr.To(false), InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "PacketCluster", Name: pc.Name,
		}},
	}
	for _, obj := range []client.Object{pc, cluster} {
		if err := e.k8s.Create(ctx, obj); err != nil {
			b.Fatal(err)
		}
	}
	return e
}

// createMachine plays CAPI and the bootstrap provider for one machine: the
// bootstrap data Secret, the Machine pointing at it, and its PacketMachine.
func (e *cappEnv) createMachine(ctx context.Context, name string, ports []infrav1.Port) (*infrav1.PacketMachine, error) {
	secret, machine := testenv.BootstrappedMachine(e.ns, "cluster", name, "#cloud-config\n")
	for _, obj := range []client.Object{secret, machine} {
		if err := e.k8s.Create(ctx, obj); err != nil {
			return nil, err
		}
	}
	pm := &infrav1.PacketMachine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: e.ns, Name: name,
			Labels: map[string]string{clusterv1.ClusterNameLabel: "cluster"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID,
			}},
		},
		Spec: infrav1.PacketMachineSpec{Plan: "c3.small.x86", OperatingSystem: "ubuntu_24_04", Ports: ports},
	}
	return pm, e.k8s.Create(ctx, pm)
}

// waitFor polls pm until done says so (with nil once pm is gone), failing
// at capiTimeout.
func (e *cappEnv) waitFor(b *testing.B, pm *infrav1.PacketMachine, done func(*infrav1.PacketMachine) bool) {
	b.Helper()
	deadline := time.Now().Add(capiTimeout)
	for {
		current := &infrav1.PacketMachine{}
		err := e.k8s.Get(context.Background(), client.ObjectKeyFromObject(pm), current)
		switch {
		case apierrors.IsNotFound(err):
			current = nil
		case err != nil:
			b.Fatal(err)
		}
		if done(current) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: not done after %s", pm.Name, capiTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func vlansAttached(pm *infrav1.PacketMachine) bool {
	return pm != nil && meta.IsStatusConditionTrue(pm.Status.Conditions, infrav1.VLANsAttachedCondition)
}

func provisionedMachine(pm *infrav1.PacketMachine) bool {
	return pm != nil && ptr.Deref(pm.Status.Initialization.Provisioned, false)
}

// callCase is a machine's ports and the VXLANs of their networks.
type callCase struct {
	name  string
	ports map[string][]int32
}

// extraVXLANs are the VLANs the call benchmark adds to metro da, beyond the
// example seed's 1001-1003, so that ports can carry many.
const (
	firstExtraVXLAN = 1004
	lastExtraVXLAN  = 1016
)

var callCases = []callCase{
	{"bond0-4vlans", map[string][]int32{"bond0": {1001, 1002, 1003, 1004}}},
	{"bond0-4vlans+eth1-4vlans", map[string][]int32{"bond0": {1001, 1002, 1003, 1004}, "eth1": {1005, 1006, 1007, 1008}}},
	{"bond0-16vlans", map[string][]int32{"bond0": {1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 1015, 1016}}},
}

// portsOf are the PacketMachine ports of c, bond0 first, every network with
// a static address of its own.
func (c callCase) portsOf() []infrav1.Port {
	var out []infrav1.Port
	for _, name := range slices.Sorted(maps.Keys(c.ports)) {
		p := infrav1.Port{Name: name}
		for _, v := range c.ports[name] {
			p.Networks = append(p.Networks, infrav1.Network{VXLAN: v, Address: fmt.Sprintf("192.168.%d.5/24", v-1000)})
		}
		out = append(out, p)
	}
	return out
}

// countedOps are the operations the call benchmark reports, writes first.
var countedOps = []sim.Operation{
	sim.OpCreateDevice, sim.OpDisbondPort, sim.OpCreatePortVlanAssignmentBatch, sim.OpAssignPort, sim.OpDeleteDevice,
	sim.OpFindProjectDevices, sim.OpFindDeviceByID, sim.OpFindVirtualNetworks, sim.OpFindPortByID,
	sim.OpFindPortVlanAssignmentBatches, sim.OpFindDeviceEvents,
}

var writeOps = []sim.Operation{sim.OpCreateDevice, sim.OpDisbondPort, sim.OpCreatePortVlanAssignmentBatch, sim.OpAssignPort, sim.OpDeleteDevice}

// callSim is a simulator of the example world with VLANs firstExtraVXLAN to
// lastExtraVXLAN added in its metro, with short platform timings so that
// every state is seen.
func callSim(b *testing.B, opts sim.Options) *simtest.Sim {
	b.Helper()
	s, err := simtest.Start(opts, func(f *sim.SeedFile) {
		for v := int32(firstExtraVXLAN); v <= lastExtraVXLAN; v++ {
			f.Projects[0].VirtualNetworks = append(f.Projects[0].VirtualNetworks, sim.SeedVirtualNetwork{VXLAN: v, Metro: simtest.Metro})
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	return s
}

// calls are the calls the simulator received so far, by counted operation.
func calls(s *simtest.Sim) map[sim.Operation]int {
	out := map[sim.Operation]int{}
	for _, op := range countedOps {
		out[op] = s.Calls(op)
	}
	return out
}

// tally adds the calls made since before to total, under phase.
func tally(total map[string]int, s *simtest.Sim, before map[sim.Operation]int, phase string) map[sim.Operation]int {
	now := calls(s)
	for _, op := range countedOps {
		n := now[op] - before[op]
		total[string(op)+"-"+phase] += n
		if slices.Contains(writeOps, op) {
			total["writes-"+phase] += n
		}
	}
	return now
}

// reportCalls reports every non-zero total per machine.
func reportCalls(b *testing.B, total map[string]int) {
	for _, unit := range slices.Sorted(maps.Keys(total)) {
		if total[unit] > 0 {
			b.ReportMetric(float64(total[unit])/float64(b.N), unit)
		}
	}
}

func BenchmarkMachineAPICalls(b *testing.B) {
	setup(b)
	for _, c := range callCases {
		b.Run("ours/"+c.name, func(b *testing.B) {
			metalSim := callSim(b, sim.Options{DeviceProvisionDelay: 2 * time.Second, BatchDelay: time.Second, DeviceDeprovisionDelay: 2 * time.Second})
			e := startCAPP(b, metalSim)
			ctx := context.Background()
			total := map[string]int{}
			for i := range b.N {
				before := calls(metalSim)
				pm, err := e.createMachine(ctx, fmt.Sprintf("m%d", i), c.portsOf())
				if err != nil {
					b.Fatal(err)
				}
				e.waitFor(b, pm, vlansAttached)
				attached := calls(metalSim)
				checkWrites(b, c, before, attached)
				before = tally(total, metalSim, before, "attached")
				if err := e.k8s.Delete(ctx, pm); err != nil {
					b.Fatal(err)
				}
				e.waitFor(b, pm, func(pm *infrav1.PacketMachine) bool { return pm == nil })
				tally(total, metalSim, before, "deleted")
			}
			reportCalls(b, total)
		})
		b.Run("per-vlan/"+c.name, func(b *testing.B) {
			metalSim := callSim(b, sim.Options{})
			api, err := metal.NewClient(metal.Config{APIKey: simtest.APIKey, BaseURL: metalSim.URL, ProjectID: simtest.Project})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			total := map[string]int{}
			for i := range b.N {
				dev, err := api.CreateDevice(ctx, metal.DeviceRequest{Tag: fmt.Sprintf("per-vlan-%d", i), Plan: "c3.small.x86", OperatingSystem: "ubuntu_24_04", Metro: simtest.Metro})
				if err != nil {
					b.Fatal(err)
				}
				before := calls(metalSim)
				if err := attachPerVLAN(ctx, api, simtest.SDK(metalSim.URL, simtest.APIKey), dev.GetId(), c.ports); err != nil {
					b.Fatal(err)
				}
				tally(total, metalSim, before, "attached")
			}
			reportCalls(b, total)
		})
	}
}

// checkWrites: one create and, per port, at most one batch and (for a NIC
// out of the bond) one disbond, whatever the number of VLANs.
func checkWrites(b *testing.B, c callCase, before, after map[sim.Operation]int) {
	b.Helper()
	nics := len(c.ports)
	if _, ok := c.ports["bond0"]; ok {
		nics--
	}
	limits := map[sim.Operation]int{
		sim.OpCreateDevice:                  1,
		sim.OpCreatePortVlanAssignmentBatch: len(c.ports),
		sim.OpDisbondPort:                   nics,
		sim.OpAssignPort:                    0,
	}
	for op, limit := range limits {
		if n := after[op] - before[op]; n > limit {
			b.Errorf("%s: %d calls, at most %d", op, n, limit)
		}
	}
}

// attachPerVLAN gives the ports of device id their VLANs the way the
// unmerged upstream Layer 2 change does: a NIC out of the bond first, then
// for every VLAN a list of the project's VLANs to find it, a get of the port
// to see whether it carries it, and one assign call. Those two are calls the
// providers never make, so they go through the bare SDK (sdk).
func attachPerVLAN(ctx context.Context, api *metal.Client, sdk *metalv1.APIClient, id string, ports map[string][]int32) error {
	dev, err := api.GetDevice(ctx, id)
	if err != nil {
		return err
	}
	portIDs := map[string]string{}
	for _, p := range dev.GetNetworkPorts() {
		portIDs[p.GetName()] = p.GetId()
	}
	for _, name := range slices.Sorted(maps.Keys(ports)) {
		if name != "bond0" {
			if _, err := api.DisbondPort(ctx, portIDs[name], false); err != nil {
				return err
			}
		}
		for _, vxlan := range ports[name] {
			vlans, err := api.ListVirtualNetworks(ctx, simtest.Metro)
			if err != nil {
				return err
			}
			i := slices.IndexFunc(vlans, func(vn metalv1.VirtualNetwork) bool { return vn.GetVxlan() == vxlan })
			if i < 0 {
				return fmt.Errorf("no VLAN %d in %s", vxlan, simtest.Metro)
			}
			port, err := simtest.Port(ctx, sdk, portIDs[name])
			if err != nil {
				return err
			}
			if slices.ContainsFunc(port.GetVirtualNetworks(), func(vn metalv1.VirtualNetwork) bool { return vn.GetId() == vlans[i].GetId() }) {
				continue
			}
			if err := simtest.AssignPort(ctx, sdk, portIDs[name], vlans[i].GetId()); err != nil {
				return err
			}
		}
	}
	return nil
}

// BenchmarkProvisionBurst creates burstMachines PacketMachines at once and
// waits until every one is provisioned.
func BenchmarkProvisionBurst(b *testing.B) {
	setup(b)
	for range b.N {
		metalSim, err := simtest.Start(sim.Options{
			DeviceProvisionDelay: burstProvision,
			MaxDevicesInFlight:   burstInFlight,
			Latency:              burstLatency,
		}, func(f *sim.SeedFile) {
			for i := range burstForeignDevices {
				f.Projects[0].Devices = append(f.Projects[0].Devices, sim.SeedDevice{
					Hostname: fmt.Sprintf("other-team-%04d", i), Plan: "c3.small.x86", Metro: simtest.Metro,
					OperatingSystem: "ubuntu_24_04", Tags: []string{"team:other"},
				})
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(metalSim.Close)
		e := startCAPP(b, metalSim)
		ctx := context.Background()
		start := time.Now()
		machines := make([]*infrav1.PacketMachine, burstMachines)
		for i := range machines {
			if machines[i], err = e.createMachine(ctx, fmt.Sprintf("burst-%03d", i), nil); err != nil {
				b.Fatal(err)
			}
		}
		// The floor: burstMachines/burstInFlight waves of burstProvision.
		floor := time.Duration((burstMachines+burstInFlight-1)/burstInFlight) * burstProvision
		e.bootNodes(b, metalSim, machines, floor+capiTimeout)
		elapsed := time.Since(start)
		requests, lists := metalSim.TotalCalls(), metalSim.Calls(sim.OpFindProjectDevices)
		checkOneActiveDeviceEach(b, metalSim, machines)
		b.ReportMetric(elapsed.Seconds(), "s-all-provisioned")
		b.ReportMetric(elapsed.Seconds()/floor.Seconds(), "x-floor")
		b.ReportMetric(float64(metalSim.Answers(sim.OpCreateDevice, http.StatusTooManyRequests)), "create-429s")
		b.ReportMetric(float64(metalSim.Calls(sim.OpCreateDevice)), "create-calls")
		b.ReportMetric(float64(requests)/burstMachines, "requests/machine")
		b.ReportMetric(float64(lists), "device-lists")
		b.ReportMetric(float64(metalSim.Calls(sim.OpFindDeviceByID))/burstMachines, "device-reads/machine")
		b.ReportMetric(float64(metalSim.Calls(sim.OpFindDeviceEvents))/burstMachines, "event-reads/machine")
	}
}

// bootNodes plays the machines' nodes until every machine is provisioned:
// a node reports its network configured (the user state its network script
// posts) as soon as its device is active, so that the requests counted are
// those of a machine whose node boots, not of one that waits for a node
// that never comes. It reads the machines with one list every burstPoll,
// and fails after timeout.
func (e *cappEnv) bootNodes(b *testing.B, metalSim *simtest.Sim, machines []*infrav1.PacketMachine, timeout time.Duration) {
	b.Helper()
	reported := map[string]bool{}
	deadline := time.Now().Add(timeout)
	for len(reported) < len(machines) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d machines provisioned after %s", len(reported), len(machines), timeout)
		}
		time.Sleep(burstPoll)
		var list infrav1.PacketMachineList
		if err := e.k8s.List(context.Background(), &list, client.InNamespace(e.ns)); err != nil {
			b.Fatal(err)
		}
		for _, pm := range list.Items {
			if reported[pm.Name] || !provisionedMachine(&pm) {
				continue
			}
			if err := metalSim.PostUserState(device.DeviceID(pm.Spec.ProviderID), "succeeded", 1000, "network configured"); err != nil {
				b.Fatalf("%s: %v", pm.Name, err)
			}
			reported[pm.Name] = true
		}
	}
}

// checkOneActiveDeviceEach: the burst left exactly one device per machine,
// each active, and no other.
func checkOneActiveDeviceEach(b *testing.B, metalSim *simtest.Sim, machines []*infrav1.PacketMachine) {
	b.Helper()
	api, err := metal.NewClient(metal.Config{APIKey: simtest.APIKey, BaseURL: metalSim.URL, ProjectID: simtest.Project})
	if err != nil {
		b.Fatal(err)
	}
	devices, err := api.ListDevices(context.Background(), metal.DeviceFilter{})
	if err != nil {
		b.Fatal(err)
	}
	devices = slices.DeleteFunc(devices, func(d metalv1.Device) bool { return slices.Contains(d.GetTags(), "team:other") })
	if len(devices) != len(machines) {
		b.Fatalf("%d devices for %d machines", len(devices), len(machines))
	}
	hostnames := map[string]bool{}
	for _, d := range devices {
		if d.GetState() != metalv1.DEVICESTATE_ACTIVE {
			b.Errorf("device %s of %s is %s", d.GetId(), d.GetHostname(), d.GetState())
		}
		hostnames[d.GetHostname()] = true
	}
	for _, pm := range machines {
		if !hostnames[pm.Name] {
			b.Errorf("no device for %s", pm.Name)
		}
	}
}
