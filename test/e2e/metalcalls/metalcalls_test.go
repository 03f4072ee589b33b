// Package metalcalls holds the Metal API request budget of a PacketMachine:
// the CAPP manager against a real API server and the simulator, in a
// project that already holds another team's devices, counting every request
// the simulator receives. It is not timed: the budget is a count, and it
// must not grow with the devices of the project, nor with the time the
// platform takes to provision them.
package metalcalls

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

const (
	// machines is the MachineDeployment's size; foreignDevices the devices
	// of another team already in the project.
	machines       = 3
	foreignDevices = 1000
	// The budget per machine: from its creation until it is provisioned
	// (device active, VLANs attached), and its deletion.
	provisionBudget = 12
	deleteBudget    = 4
)

func TestMetalRequestsPerMachine(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(3 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	ctx := context.Background()
	ctrl.SetLogger(zap.New(zap.WriteTo(testWriter{t}), zap.UseDevMode(true)))

	metalSim, k8s, ns := start(ctx, t, g)

	before := metalSim.TotalCalls()
	ms, pms := provisionMachines(ctx, g, k8s, ns)
	provisioning := metalSim.TotalCalls() - before
	t.Logf("%d Metal requests for %d machines to be provisioned (%.1f each), %d foreign devices in the project",
		provisioning, machines, float64(provisioning)/machines, foreignDevices)
	g.Expect(provisioning).To(BeNumerically("<=", machines*provisionBudget), "Metal requests from creation to provisioned")
	g.Expect(metalSim.Calls(sim.OpFindProjectDevices)).To(BeZero(), "project-wide device lists")
	g.Expect(metalSim.Calls(sim.OpCreateDevice)).To(Equal(machines))

	before = metalSim.TotalCalls()
	deleteMachines(ctx, g, k8s, ms, pms)
	deleting := metalSim.TotalCalls() - before
	t.Logf("%d Metal requests for %d machines to be deleted (%.1f each)", deleting, machines, float64(deleting)/machines)
	g.Expect(deleting).To(BeNumerically("<=", machines*deleteBudget), "Metal requests from deletion to gone")
	g.Expect(metalSim.Calls(sim.OpDeleteDevice)).To(Equal(machines))
}

// start runs the simulator (with foreignDevices devices of another team in
// the project), an API server and the CAPP manager, and returns a namespace
// with a Cluster and its PacketCluster.
func start(ctx context.Context, t *testing.T, g Gomega) (*simtest.Sim, client.Client, string) {
	return startWith(ctx, t, g, sim.Options{
		DeviceProvisionDelay: 2 * time.Second, BatchDelay: time.Second, DeviceDeprovisionDelay: 2 * time.Second, MaxDevicesInFlight: 5,
	})
}

// startWith is start with the simulator's options.
func startWith(ctx context.Context, t *testing.T, g Gomega, simOpts sim.Options) (*simtest.Sim, client.Client, string) {
	metalSim, err := simtest.Start(simOpts, func(f *sim.SeedFile) {
		for i := range foreignDevices {
			f.Projects[0].Devices = append(f.Projects[0].Devices, sim.SeedDevice{
				Hostname: fmt.Sprintf("other-team-%04d", i), Plan: "c3.small.x86", Metro: simtest.Metro, OperatingSystem: "ubuntu_24_04",
				Tags: []string{"team:other"},
			})
		}
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(metalSim.Close)
	env, err := testenv.Start(testenv.Options{CAPPCRDs: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	opts := env.CAPPOptions(4, "")
	opts.Getenv = func(name string) string {
		return map[string]string{metal.EnvAPIKey: simtest.APIKey, metal.EnvBaseURL: metalSim.URL}[name]
	}
	stop, err := env.StartCAPP(ctx, opts)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(stop)
	k8s := env.Client
	ns, err := env.NewNamespace(ctx, "calls")
	g.Expect(err).NotTo(HaveOccurred())
	createCluster(ctx, g, k8s, ns)
	return metalSim, k8s, ns
}

func createCluster(ctx context.Context, g Gomega, k8s client.Client, ns string) {
	pc := &infrav1.PacketCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster", Labels: map[string]string{clusterv1.ClusterNameLabel: "cluster"}},
		Spec: infrav1.PacketClusterSpec{
			ProjectID: simtest.Project, Metro: simtest.Metro,
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "192.0.2.10", Port: 6443},
		},
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster"},
		Spec: clusterv1.ClusterSpec{Paused: ptr.To(false), InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "PacketCluster", Name: pc.Name,
		}},
	}
	for _, obj := range []client.Object{pc, cluster} {
		g.Expect(k8s.Create(ctx, obj)).To(Succeed())
	}
}

// createMachine plays CAPI and the bootstrap provider for one machine of a
// MachineDeployment: bootstrap data, the Machine, and its PacketMachine with
// one network on bond0.
func createMachine(ctx context.Context, g Gomega, k8s client.Client, ns, name string, edits ...func(*infrav1.PacketMachine)) (*clusterv1.Machine, *infrav1.PacketMachine) {
	secret, machine := testenv.BootstrappedMachine(ns, "cluster", name, "#cloud-config\n")
	for _, obj := range []client.Object{secret, machine} {
		g.Expect(k8s.Create(ctx, obj)).To(Succeed())
	}
	pm := &infrav1.PacketMachine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: "cluster"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID}},
		},
		Spec: infrav1.PacketMachineSpec{Plan: "c3.small.x86", OperatingSystem: "ubuntu_24_04", Ports: []infrav1.Port{{
			Name: "bond0", Networks: []infrav1.Network{{VXLAN: simtest.NodesVXLAN, Address: "10.60.1.5/29"}},
		}}},
	}
	for _, edit := range edits {
		edit(pm)
	}
	g.Expect(k8s.Create(ctx, pm)).To(Succeed())
	return machine, pm
}

// touch updates an annotation of each Machine, as CAPI's controllers update
// Machines while they provision.
func touch(ctx context.Context, k8s client.Client, ms []*clusterv1.Machine) {
	for _, m := range ms {
		patch := client.RawPatch("application/merge-patch+json",
			fmt.Appendf(nil, `{"metadata":{"annotations":{"test/touched":"%d"}}}`, time.Now().UnixNano()))
		_ = k8s.Patch(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name}}, patch)
	}
}

func provisioned(ctx context.Context, k8s client.Client, pm *infrav1.PacketMachine) bool {
	current := &infrav1.PacketMachine{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pm), current); err != nil {
		return false
	}
	return ptr.Deref(current.Status.Initialization.Provisioned, false)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// provisionMachines creates the machines and waits until each is
// provisioned. CAPI's controllers update the Machines all along; each
// update wakes the PacketMachine, which must not turn it into Metal reads.
func provisionMachines(ctx context.Context, g Gomega, k8s client.Client, ns string) ([]*clusterv1.Machine, []*infrav1.PacketMachine) {
	var pms []*infrav1.PacketMachine
	var ms []*clusterv1.Machine
	for i := range machines {
		m, pm := createMachine(ctx, g, k8s, ns, fmt.Sprintf("md-%d", i))
		ms, pms = append(ms, m), append(pms, pm)
	}
	for _, pm := range pms {
		g.Eventually(func() bool {
			touch(ctx, k8s, ms)
			return provisioned(ctx, k8s, pm)
		}).Should(BeTrue(), "%s provisioned", pm.Name)
	}
	return ms, pms
}

// deleteMachines deletes the PacketMachines and waits until each is gone,
// the Machines updated all along as in provisionMachines.
func deleteMachines(ctx context.Context, g Gomega, k8s client.Client, ms []*clusterv1.Machine, pms []*infrav1.PacketMachine) {
	for _, pm := range pms {
		g.Expect(k8s.Delete(ctx, pm)).To(Succeed())
	}
	for _, pm := range pms {
		g.Eventually(func() bool {
			touch(ctx, k8s, ms)
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(pm), &infrav1.PacketMachine{}))
		}).Should(BeTrue(), "%s gone", pm.Name)
	}
}
