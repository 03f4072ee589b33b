package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// The simulator as metalsim.yaml runs it: its namespace, and the fixed
// address of its Service (the cluster has no DNS).
const (
	simNamespace = "metal-sim"
	simURL       = "http://10.96.100.10:8099"
)

// The workload Cluster of the flow, rendered from the release's default
// flavor into its own namespace; the flavor names its MachineDeployment
// <cluster>-worker-a and its pool <cluster>-nodes.
const (
	flowNamespace = "flow"
	flowCluster   = "demo"
	workers       = flowCluster + "-worker-a"
	nodesPool     = flowCluster + "-nodes"
)

// keepEnv set (make run-management) keeps the cluster running, once the flow
// has its machines, until the outer test writes the stop file (on Ctrl-C).
const keepEnv = "CLUSTER_KEEP"

// startSimulator runs the Metal API simulator's image as a Deployment behind
// its Service and waits until it serves.
func startSimulator(ctx context.Context, t *testing.T, k8s client.Client) {
	objects, err := testenv.ReadObjects("metalsim.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objects {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	waitFor(ctx, t, 5*time.Minute, "the simulator's Deployment is Available", func() error {
		if err := stuck(ctx, k8s, nil); err != nil {
			t.Fatal(err)
		}
		d := &appsv1.Deployment{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: simNamespace, Name: "metalsim"}, d); err != nil {
			return err
		}
		if d.Status.AvailableReplicas == 0 {
			return fmt.Errorf("not Available: %s", podStates(ctx, k8s, simNamespace))
		}
		return nil
	})
}

// flow is the workload Cluster's flow: Cluster API's core manager and our
// two managers, each a Pod, drive the flavor's MachineDeployment against the
// simulator, which the test reads through its Service with the Metal client.
type flow struct {
	*cluster
	metal *metal.Client
	// infrastructure is what `clusterctl generate cluster --infrastructure`
	// is given: the provider's name, whose version clusterctl reads from
	// its inventory in the cluster, which `clusterctl init` wrote.
	infrastructure string
}

func newFlow(t *testing.T, c *cluster) *flow {
	api, err := metal.NewClient(metal.Config{APIKey: simtest.APIKey, BaseURL: simURL, ProjectID: simtest.Project})
	if err != nil {
		t.Fatal(err)
	}
	return &flow{cluster: c, metal: api, infrastructure: "packet"}
}

// healthy fails the test at once for what waiting will not mend: a process
// of the node gone, a container that cannot start.
func (f *flow) healthy(ctx context.Context, t *testing.T) {
	if err := f.n.exited(); err != nil {
		t.Fatal(err)
	}
	if err := stuck(ctx, f.k8s, f.namespaces); err != nil {
		t.Fatal(err)
	}
}

// create renders the release's default flavor with `clusterctl generate
// cluster` for 3 workers on the simulator's VLAN 1001, adapts it to a
// cluster without a control plane, and creates it with what its user
// creates beside it.
func (f *flow) create(ctx context.Context, t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: flowNamespace}}
	if err := f.k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	out, err := testenv.RunTool(".", append(f.ctlEnv, "PROJECT_ID="+simtest.Project, "METRO="+simtest.Metro,
		"SSH_KEY=ssh-ed25519 AAAA cluster-test", fmt.Sprintf("NODE_VXLAN=%d", simtest.NodesVXLAN)),
		os.Getenv("CLUSTERCTL"), "generate", "cluster", flowCluster, "--infrastructure", f.infrastructure,
		"--target-namespace", flowNamespace, "--kubernetes-version", "v1.36.3", "--worker-machine-count", "3",
		"--config", f.configPath, "--kubeconfig", f.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := testenv.DecodeObjects(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	bootstrap := testenv.BootstrapData(flowNamespace, workers, "#cloud-config\nruncmd:\n  - echo joined\n")
	objects := append(testenv.FlavorInputs(flowNamespace, flowCluster, "metal-credentials", simtest.APIKey), bootstrap)
	for _, obj := range withoutControlPlane(t, rendered, bootstrap.Name) {
		objects = append(objects, obj)
	}
	for _, obj := range objects {
		if err := f.k8s.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
}

// withoutControlPlane adapts the rendered flavor to a cluster whose control
// plane cannot come up (the devices are simulated), as test/e2e/flow's
// cluster is: no KubeadmControlPlane (nor its machine template), and the
// workers' bootstrap data from the Secret dataSecret instead of kubeadm's
// join configuration, which kubeadm writes only once a control plane is
// initialized.
func withoutControlPlane(t *testing.T, rendered []*unstructured.Unstructured, dataSecret string) []*unstructured.Unstructured {
	var kept []*unstructured.Unstructured
	dropped := 0
	for _, obj := range rendered {
		switch {
		case obj.GetKind() == "KubeadmControlPlane", obj.GetKind() == "KubeadmConfigTemplate",
			obj.GetKind() == "PacketMachineTemplate" && obj.GetName() == flowCluster+"-control-plane":
			dropped++
			continue
		case obj.GetKind() == "Cluster":
			unstructured.RemoveNestedField(obj.Object, "spec", "controlPlaneRef")
		case obj.GetKind() == "MachineDeployment":
			if err := unstructured.SetNestedMap(obj.Object, map[string]any{"dataSecretName": dataSecret},
				"spec", "template", "spec", "bootstrap"); err != nil {
				t.Fatal(err)
			}
		}
		kept = append(kept, obj)
	}
	if dropped != 3 {
		t.Fatalf("the flavor has %d of the control plane, its machine template and the workers' kubeadm template, want all 3", dropped)
	}
	return kept
}

// machinesReady checks that want Machines are provisioned, each on its own
// device, active in the simulator with bond0 carrying the nodes VLAN, and
// that every claim is bound to an address no other claim holds.
func (f *flow) machinesReady(ctx context.Context, want int) error {
	machines := &clusterv1.MachineList{}
	if err := f.k8s.List(ctx, machines, client.InNamespace(flowNamespace)); err != nil {
		return err
	}
	var providerIDs []string
	for _, m := range machines.Items {
		if ptr.Deref(m.Status.Initialization.InfrastructureProvisioned, false) && m.Spec.ProviderID != "" {
			providerIDs = append(providerIDs, m.Spec.ProviderID)
		}
	}
	if len(providerIDs) != want || len(machines.Items) != want {
		return fmt.Errorf("%d Machines, %d provisioned, want %d%s", len(machines.Items), len(providerIDs), want, f.state(ctx))
	}
	devices, err := f.metal.ListDevices(ctx, metal.DeviceFilter{Tag: device.ClusterTagPrefix + flowCluster})
	if err != nil {
		return err
	}
	var deviceIDs []string
	for _, d := range devices {
		deviceIDs = append(deviceIDs, device.ProviderID(d.GetId()))
		if d.GetState() != metalv1.DEVICESTATE_ACTIVE {
			return fmt.Errorf("device %s is %s, want active", d.GetId(), d.GetState())
		}
		vlans := map[string][]string{}
		for _, p := range d.GetNetworkPorts() {
			for _, vn := range p.GetVirtualNetworks() {
				vlans[p.GetName()] = append(vlans[p.GetName()], path.Base(vn.GetHref()))
			}
		}
		if !slices.Equal(vlans["bond0"], []string{simtest.NodesVLAN}) {
			return fmt.Errorf("device %s: its ports carry the VLANs %v, want bond0 to carry the nodes VLAN %s", d.GetId(), vlans, simtest.NodesVLAN)
		}
	}
	slices.Sort(providerIDs)
	slices.Sort(deviceIDs)
	if !slices.Equal(providerIDs, deviceIDs) {
		return fmt.Errorf("the Machines' providerIDs %v, the cluster's devices %v: want one device per Machine, no other", providerIDs, deviceIDs)
	}
	return f.claimsBound(ctx, want)
}

// claimsBound checks that want claims on the pool are bound, and that no
// address is held twice.
func (f *flow) claimsBound(ctx context.Context, want int) error {
	claims := &ipamv1.IPAddressClaimList{}
	if err := f.k8s.List(ctx, claims, client.InNamespace(flowNamespace)); err != nil {
		return err
	}
	bound := 0
	for _, c := range claims.Items {
		if c.Spec.PoolRef.Kind != v1alpha1.MetalVRFIPPoolKind || c.Spec.PoolRef.Name != nodesPool {
			return fmt.Errorf("claim %s names the pool %s %s, want %s %s", c.Name, c.Spec.PoolRef.Kind, c.Spec.PoolRef.Name, v1alpha1.MetalVRFIPPoolKind, nodesPool)
		}
		if c.Status.AddressRef.Name != "" {
			bound++
		}
	}
	if len(claims.Items) != want || bound != want {
		return fmt.Errorf("%d claims, %d bound, want %d%s", len(claims.Items), bound, want, f.state(ctx))
	}
	addresses := &ipamv1.IPAddressList{}
	if err := f.k8s.List(ctx, addresses, client.InNamespace(flowNamespace)); err != nil {
		return err
	}
	holder := map[string]string{}
	for _, a := range addresses.Items {
		if other, taken := holder[a.Spec.Address]; taken {
			return &heldTwiceError{address: a.Spec.Address, claims: []string{other, a.Spec.ClaimRef.Name}}
		}
		holder[a.Spec.Address] = a.Spec.ClaimRef.Name
	}
	if len(addresses.Items) != want {
		return fmt.Errorf("%d IPAddresses for %d bound claims", len(addresses.Items), want)
	}
	return nil
}

// heldTwiceError is an address two claims hold: no wait mends it.
type heldTwiceError struct {
	address string
	claims  []string
}

func (e *heldTwiceError) Error() string {
	return fmt.Sprintf("the address %s is held twice, by the claims %v", e.address, e.claims)
}

// waitMachines waits until want machines are ready, and fails at once for an
// address held twice.
func (f *flow) waitMachines(ctx context.Context, t *testing.T, want int) {
	waitFor(ctx, t, 6*time.Minute, fmt.Sprintf("%d machines on active devices with their VLANs and bound claims", want), func() error {
		f.healthy(ctx, t)
		err := f.machinesReady(ctx, want)
		if twice := (*heldTwiceError)(nil); errors.As(err, &twice) {
			t.Fatal(err)
		}
		return err
	})
}

// state describes the Machines, PacketMachines (their conditions that are
// not True) and claims, for a failure message.
func (f *flow) state(ctx context.Context) string {
	var b strings.Builder
	machines := &clusterv1.MachineList{}
	if err := f.k8s.List(ctx, machines, client.InNamespace(flowNamespace)); err == nil {
		for _, m := range machines.Items {
			fmt.Fprintf(&b, "\n  Machine %s: phase %s, providerID %q", m.Name, m.Status.Phase, m.Spec.ProviderID)
		}
	}
	pms := &infrav1.PacketMachineList{}
	if err := f.k8s.List(ctx, pms, client.InNamespace(flowNamespace)); err == nil {
		for _, pm := range pms.Items {
			fmt.Fprintf(&b, "\n  PacketMachine %s:", pm.Name)
			for _, c := range pm.Status.Conditions {
				if c.Status != metav1.ConditionTrue {
					fmt.Fprintf(&b, " %s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message)
				}
			}
		}
	}
	claims := &ipamv1.IPAddressClaimList{}
	if err := f.k8s.List(ctx, claims, client.InNamespace(flowNamespace)); err == nil {
		for _, c := range claims.Items {
			fmt.Fprintf(&b, "\n  IPAddressClaim %s: address %q", c.Name, c.Status.AddressRef.Name)
			for _, cond := range c.Status.Conditions {
				if cond.Status != metav1.ConditionTrue {
					fmt.Fprintf(&b, " %s=%s (%s: %s)", cond.Type, cond.Status, cond.Reason, cond.Message)
				}
			}
		}
	}
	return b.String()
}

func (f *flow) scale(ctx context.Context, t *testing.T, replicas int32) {
	md := &clusterv1.MachineDeployment{}
	if err := f.k8s.Get(ctx, client.ObjectKey{Namespace: flowNamespace, Name: workers}, md); err != nil {
		t.Fatal(err)
	}
	base := md.DeepCopy()
	md.Spec.Replicas = ptr.To(replicas)
	if err := f.k8s.Patch(ctx, md, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

// ipamPod is the IPAM manager's running Pod, with the Lease it holds.
func (f *flow) ipamPod(ctx context.Context) (*corev1.Pod, *coordinationv1.Lease, error) {
	const ns = "ipam-metal-vrf-system"
	pods := &corev1.PodList{}
	if err := f.k8s.List(ctx, pods, client.InNamespace(ns)); err != nil {
		return nil, nil, err
	}
	leases := &coordinationv1.LeaseList{}
	if err := f.k8s.List(ctx, leases, client.InNamespace(ns)); err != nil {
		return nil, nil, err
	}
	for i, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		for j, l := range leases.Items {
			if strings.HasPrefix(ptr.Deref(l.Spec.HolderIdentity, ""), p.Name+"_") {
				return &pods.Items[i], &leases.Items[j], nil
			}
		}
	}
	return nil, nil, fmt.Errorf("no running Pod holds a Lease in %s:%s", ns, podStates(ctx, f.k8s, ns))
}

// takeOver scales the workers from 3 to 6 and, as soon as the first claim
// of a new machine exists, deletes the IPAM manager's Pod: its Deployment's
// new Pod must take the Lease over and bind every claim, none to an address
// another holds.
func (f *flow) takeOver(ctx context.Context, t *testing.T) {
	var old *corev1.Pod
	waitFor(ctx, t, 3*time.Minute, "the IPAM manager's Pod holds its Lease", func() (err error) {
		old, _, err = f.ipamPod(ctx)
		return err
	})
	f.scale(ctx, t, 6)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		claims := &ipamv1.IPAddressClaimList{}
		if err := f.k8s.List(ctx, claims, client.InNamespace(flowNamespace)); err != nil {
			t.Fatal(err)
		}
		if len(claims.Items) > 3 {
			bound := 0
			for _, c := range claims.Items {
				if c.Status.AddressRef.Name != "" {
					bound++
				}
			}
			t.Logf("%d claims, %d bound: deleting the IPAM manager's Pod %s", len(claims.Items), bound, old.Name)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no claim of a new machine within 3m:%s", f.state(ctx))
		}
		f.healthy(ctx, t)
		time.Sleep(50 * time.Millisecond)
	}
	if err := f.k8s.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 5*time.Minute, "a new IPAM manager Pod holds the Lease", func() error {
		f.healthy(ctx, t)
		pod, lease, err := f.ipamPod(ctx)
		if err != nil {
			return err
		}
		if pod.UID == old.UID {
			return fmt.Errorf("the deleted Pod %s still holds the Lease %s", old.Name, lease.Name)
		}
		t.Logf("take-over seen: the Lease %s is held by %s, the deleted Pod was %s", lease.Name, ptr.Deref(lease.Spec.HolderIdentity, ""), old.Name)
		return nil
	})
	f.waitMachines(ctx, t, 6)
}

// scaleToZero scales the workers to 0 and deletes the Cluster: no device,
// PacketMachine, claim or address may be left, nor the control plane
// endpoint's reservation.
func (f *flow) scaleToZero(ctx context.Context, t *testing.T) {
	f.scale(ctx, t, 0)
	waitFor(ctx, t, 6*time.Minute, "nothing left of the machines", func() error {
		f.healthy(ctx, t)
		return f.machinesGone(ctx)
	})
	pc := &infrav1.PacketCluster{}
	if err := f.k8s.Get(ctx, client.ObjectKey{Namespace: flowNamespace, Name: flowCluster}, pc); err != nil {
		t.Fatal(err)
	}
	endpointTag := device.EndpointTagPrefix + string(pc.UID)
	reservations, err := f.metal.ListPublicIPv4Reservations(ctx, endpointTag)
	if err != nil {
		t.Fatal(err)
	}
	if len(reservations) != 1 {
		t.Errorf("%d public IPv4 reservations tagged %s, want the endpoint's one (vipManager CPEM)", len(reservations), endpointTag)
	}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: flowNamespace, Name: flowCluster}}
	if err := f.k8s.Delete(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 5*time.Minute, "the Cluster and its PacketCluster deleted, the endpoint released", func() error {
		f.healthy(ctx, t)
		for _, obj := range []client.Object{&clusterv1.Cluster{}, &infrav1.PacketCluster{}} {
			err := f.k8s.Get(ctx, client.ObjectKey{Namespace: flowNamespace, Name: flowCluster}, obj)
			if err == nil {
				return fmt.Errorf("%T %s still there", obj, flowCluster)
			}
			if !apierrors.IsNotFound(err) {
				return err
			}
		}
		reservations, err := f.metal.ListPublicIPv4Reservations(ctx, endpointTag)
		if err != nil {
			return err
		}
		if len(reservations) > 0 {
			return fmt.Errorf("%d public IPv4 reservations tagged %s left", len(reservations), endpointTag)
		}
		return f.machinesGone(ctx)
	})
}

// machinesGone checks that no PacketMachine, claim or address is left in
// the namespace and no device in the simulator's project.
func (f *flow) machinesGone(ctx context.Context) error {
	var left []string
	for _, list := range []client.ObjectList{&clusterv1.MachineList{}, &infrav1.PacketMachineList{}, &ipamv1.IPAddressClaimList{}, &ipamv1.IPAddressList{}} {
		if err := f.k8s.List(ctx, list, client.InNamespace(flowNamespace)); err != nil {
			return err
		}
		if n := apimeta.LenList(list); n > 0 {
			left = append(left, fmt.Sprintf("%d %T", n, list))
		}
	}
	devices, err := f.metal.ListDevices(ctx, metal.DeviceFilter{})
	if err != nil {
		return err
	}
	for _, d := range devices {
		left = append(left, fmt.Sprintf("device %s (%s, %s)", d.GetId(), d.GetHostname(), d.GetState()))
	}
	if len(left) > 0 {
		return fmt.Errorf("left: %s%s", strings.Join(left, ", "), f.state(ctx))
	}
	pool := &v1alpha1.MetalVRFIPPool{}
	if err := f.k8s.Get(ctx, client.ObjectKey{Namespace: flowNamespace, Name: nodesPool}, pool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted with the Cluster's namespace objects
		}
		return err
	}
	if used := pool.Status.IPAddresses; used == nil || used.Used != 0 {
		return fmt.Errorf("the pool %s reports %+v addresses, want 0 used", nodesPool, used)
	}
	return nil
}

// keep holds the cluster, the flow's machines running, until the outer test
// writes the stop file (make run-management, on Ctrl-C).
func (f *flow) keep(ctx context.Context, t *testing.T) {
	t.Logf(`
The cluster runs until Ctrl-C. Its addresses are in the test's network namespace: prefix each command with the nsenter line printed above.
  kubeconfig: %[1]s
  kubectl --kubeconfig %[1]s get pods -A
  kubectl --kubeconfig %[1]s get cluster-api,metalvrfippools,ipaddressclaims,ipaddresses -n %[2]s
  %[3]s describe cluster %[4]s -n %[2]s --kubeconfig %[1]s --show-conditions all
  curl -s -H 'X-Auth-Token: %[5]s' %[6]s/metal/v1/projects/%[7]s/devices   # the simulator, through its Service`,
		f.kubeconfig, flowNamespace, os.Getenv("CLUSTERCTL"), flowCluster, simtest.APIKey, simURL, simtest.Project)
	stop := filepath.Join(f.dir, stopFile)
	for {
		if _, err := os.Stat(stop); err == nil {
			t.Log("stopping: scaling to 0, deleting the Cluster, tearing the node down")
			return
		}
		f.healthy(ctx, t)
		time.Sleep(time.Second)
	}
}

// logRSS logs the resident memory of each of our Pods' main process (and
// the simulator's), read from the kernel on the node.
func logRSS(ctx context.Context, t *testing.T, k8s client.Client, when string) {
	for _, ns := range append(slices.Sorted(maps.Keys(ours)), simNamespace) {
		pods := &corev1.PodList{}
		if err := k8s.List(ctx, pods, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, pod := range pods.Items {
			if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
				continue
			}
			pid := podProcess(string(pod.UID), "/manager", "/metalsim")
			if pid == "" {
				t.Errorf("%s/%s: no /manager or /metalsim process in the Pod's cgroup", ns, pod.Name)
				continue
			}
			for _, line := range strings.Split(readProc(t, pid, "status"), "\n") {
				if rss, ok := strings.CutPrefix(line, "VmRSS:"); ok {
					t.Logf("BENCHMARK RSS %s of %s/%s: %s", when, ns, pod.Name, strings.TrimSpace(rss))
				}
			}
		}
	}
}
