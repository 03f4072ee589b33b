// Package flow drives the whole provider the way a user's cluster does:
// Cluster API's own core manager, built from the pinned module, turns a
// MachineDeployment into Machines and PacketMachines; the CAPP manager gives
// each a device with its VLANs in the Metal API simulator and addresses from
// our IPAM manager; scaling down takes everything back.
package flow

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/metal-vrf/cluster-api-metal-vrf/capp/api/v1beta1"
	"github.com/metal-vrf/cluster-api-metal-vrf/capp/device"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

const (
	clusterName = "flow"
	deployment  = "workers"
)

func TestMachineDeploymentWithCAPIsCoreManager(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(3 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(250 * time.Millisecond)
	ctx := context.Background()

	env, metalAPI := startManagementCluster(ctx, t, g)

	k8s := env.Client
	ns, err := env.NewNamespace(ctx, "flow")
	g.Expect(err).NotTo(HaveOccurred())
	// The default flavor's addons (our cloud controller manager and a CNI
	// through ClusterResourceSets) and what its user creates beside them:
	// the CNI's manifest, and the Secret carrying the cloud controller
	// manager's configuration, from which the PacketCluster reads its token
	// too.
	crs, clusterLabels := flavorAddons(t, g, env, ns, clusterName)
	objs := append(crs, testenv.FlavorInputs(ns, clusterName, "metal-credentials", simtest.APIKey)...)
	for _, obj := range append(objs, clusterObjects(ns, clusterName)...) {
		switch o := obj.(type) {
		case *clusterv1.Cluster:
			o.Labels = clusterLabels
		case *infrav1.PacketCluster:
			o.Spec.CredentialsRef = &corev1.LocalObjectReference{Name: "metal-credentials"}
		}
		g.Expect(k8s.Create(ctx, obj)).To(Succeed(), "creating %T %s", obj, obj.GetName())
	}
	scale := func(replicas int32) { scaleWorkers(ctx, g, k8s, ns, replicas) }
	provisioned := provisionedMachines(ctx, g, k8s, ns)
	devices := func() []string { return metalAPI.devices(ctx, g, clusterName) }

	cluster := &clusterv1.Cluster{}
	g.Eventually(func() bool {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, cluster)).To(Succeed())
		return ptr.Deref(cluster.Status.Initialization.InfrastructureProvisioned, false)
	}).Should(BeTrue(), "the Cluster's infrastructure (its PacketCluster) is provisioned")

	t.Log("Cluster API's core manager binds the flavor's ClusterResourceSets, and the resources they apply, to the Cluster")
	g.Eventually(func() []string {
		binding := &unstructured.Unstructured{}
		binding.SetGroupVersionKind(addonsv1.GroupVersion.WithKind("ClusterResourceSetBinding"))
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, binding); err != nil {
			return nil
		}
		bindsCluster, _, _ := unstructured.NestedString(binding.Object, "spec", "clusterName")
		g.Expect(bindsCluster).To(Equal(clusterName))
		bindings, _, _ := unstructured.NestedSlice(binding.Object, "spec", "bindings")
		var bound []string
		for _, b := range bindings {
			name, _, _ := unstructured.NestedString(b.(map[string]any), "clusterResourceSetName")
			bound = append(bound, name)
		}
		return bound
	}).Should(ConsistOf(clusterName+"-ccm", clusterName+"-cni"))
	for _, obj := range objs {
		if u, ok := obj.(*unstructured.Unstructured); ok && u.GetKind() == "ClusterResourceSet" {
			continue
		}
		g.Eventually(func() []string {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			var owners []string
			for _, ref := range obj.GetOwnerReferences() {
				owners = append(owners, ref.Kind+"/"+ref.Name)
			}
			return owners
		}).ShouldNot(BeEmpty(), "%T %s is read and owned by its ClusterResourceSet", obj, obj.GetName())
	}

	for _, replicas := range []int32{3, 5} {
		t.Logf("scaling %s to %d", deployment, replicas)
		scale(replicas)
		g.Eventually(provisioned).Should(HaveLen(int(replicas)), "Machines provisioned with providerIDs")
		g.Expect(devices()).To(ConsistOf(provisioned()), "one device per Machine, no other")
		bound := 0
		for _, id := range provisioned() {
			d, err := metalAPI.GetDevice(ctx, device.DeviceID(id))
			g.Expect(err).NotTo(HaveOccurred())
			for _, p := range d.GetNetworkPorts() {
				if p.GetName() == "bond0" {
					g.Expect(p.GetVirtualNetworks()).To(HaveLen(1), "bond0 of %s carries the nodes VLAN", id)
				}
			}
		}
		claims := &ipamv1.IPAddressClaimList{}
		g.Expect(k8s.List(ctx, claims, client.InNamespace(ns))).To(Succeed())
		for _, c := range claims.Items {
			if c.Status.AddressRef.Name != "" {
				bound++
			}
		}
		g.Expect(bound).To(Equal(int(replicas)), "one bound claim per machine")
		g.Eventually(poolUsed(ctx, k8s, ns)).Should(BeEquivalentTo(replicas))
	}

	t.Log("clusterctl describe cluster shows the machines' conditions")
	clusterctl := tool(t, "CLUSTERCTL", "clusterctl")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(env.WriteKubeconfig(kubeconfig)).To(Succeed())
	out, err := exec.Command(clusterctl, "describe", "cluster", clusterName, "-n", ns, "--kubeconfig", kubeconfig,
		"--show-conditions", "all", "--grouping=false").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	t.Logf("clusterctl describe cluster:\n%s", out)
	for _, want := range []string{"PacketMachine " + ns + "/" + deployment + "-", infrav1.DeviceReadyCondition, infrav1.VLANsAttachedCondition, infrav1.NodeNetworkConfiguredCondition} {
		g.Expect(string(out)).To(ContainSubstring(want))
	}

	t.Log("scaling to 0 takes every device, claim and address back")
	scale(0)
	g.Eventually(func() int {
		pms := &infrav1.PacketMachineList{}
		g.Expect(k8s.List(ctx, pms, client.InNamespace(ns))).To(Succeed())
		return len(pms.Items)
	}).Should(BeZero())
	g.Expect(devices()).To(BeEmpty())
	g.Eventually(func() int {
		addresses := &ipamv1.IPAddressList{}
		g.Expect(k8s.List(ctx, addresses, client.InNamespace(ns))).To(Succeed())
		claims := &ipamv1.IPAddressClaimList{}
		g.Expect(k8s.List(ctx, claims, client.InNamespace(ns))).To(Succeed())
		return len(addresses.Items) + len(claims.Items)
	}).Should(BeZero())
	g.Eventually(poolUsed(ctx, k8s, ns)).Should(BeZero())
}

// platform is the Metal API simulator, with a client of its API: one
// Equinix Metal project, whichever management cluster drives it.
type platform struct {
	*metal.Client
	sim *simtest.Sim
}

func startPlatform(t *testing.T, g Gomega) *platform {
	metalSim, err := simtest.Start(sim.Options{DeviceProvisionDelay: 2 * time.Second, BatchDelay: time.Second, DeviceDeprovisionDelay: time.Second}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(metalSim.Close)
	api, err := metal.NewClient(metal.Config{APIKey: simtest.APIKey, BaseURL: metalSim.URL, ProjectID: simtest.Project})
	g.Expect(err).NotTo(HaveOccurred())
	return &platform{Client: api, sim: metalSim}
}

// devices are the providerIDs of the devices of the Cluster named cluster.
func (p *platform) devices(ctx context.Context, g Gomega, cluster string) []string {
	list, err := p.ListDevices(ctx, metal.DeviceFilter{Tag: device.ClusterTagPrefix + cluster})
	g.Expect(err).NotTo(HaveOccurred())
	var ids []string
	for _, d := range list {
		ids = append(ids, device.ProviderID(d.GetId()))
	}
	return ids
}

// startManagementCluster starts the platform, and an API server with our
// CRDs and webhooks on which the managers run until the test ends.
func startManagementCluster(ctx context.Context, t *testing.T, g Gomega) (*testenv.Environment, *platform) {
	metalAPI := startPlatform(t, g)
	env, err := testenv.Start(testenv.Options{Webhooks: true, CAPPCRDs: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	startManagers(ctx, t, g, env, metalAPI, managerLogs(t, g))
	return env, metalAPI
}

// managerLogs is the file the core managers write to, kept when the test fails.
func managerLogs(t *testing.T, g Gomega) *os.File {
	logs, err := os.CreateTemp("", "flow-managers-*.log")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the managers' logs are in %s", logs.Name())
		} else {
			_ = os.Remove(logs.Name())
		}
	})
	return logs
}

// startManagers runs what a management cluster runs against env until the
// test ends: our IPAM and CAPP managers (in process, CAPP on the platform)
// and Cluster API's core manager (writing to logs).
func startManagers(ctx context.Context, t *testing.T, g Gomega, env *testenv.Environment, p *platform, logs io.Writer) {
	stopIPAM, err := env.StartIPAM(ctx, env.IPAMOptions(4))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(stopIPAM)
	cappOpts := env.CAPPOptions(4, "")
	cappOpts.Getenv = func(name string) string {
		return map[string]string{metal.EnvAPIKey: simtest.APIKey, metal.EnvBaseURL: p.sim.URL}[name]
	}
	stopCAPP, err := env.StartCAPP(ctx, cappOpts)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(stopCAPP)
	stopCore, err := env.StartCAPICore(logs)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(stopCore)
}

// scaleWorkers sets the MachineDeployment's replicas.
func scaleWorkers(ctx context.Context, g Gomega, k8s client.Client, ns string, replicas int32) {
	md := &clusterv1.MachineDeployment{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: deployment}, md)).To(Succeed())
	base := md.DeepCopy()
	md.Spec.Replicas = ptr.To(replicas)
	g.Expect(k8s.Patch(ctx, md, client.MergeFrom(base))).To(Succeed())
}

// provisionedMachines returns the providerIDs of the Machines CAPI holds
// provisioned.
func provisionedMachines(ctx context.Context, g Gomega, k8s client.Client, ns string) func() []string {
	return func() []string {
		machines := &clusterv1.MachineList{}
		g.Expect(k8s.List(ctx, machines, client.InNamespace(ns))).To(Succeed())
		var ids []string
		for _, m := range machines.Items {
			if ptr.Deref(m.Status.Initialization.InfrastructureProvisioned, false) && m.Spec.ProviderID != "" {
				ids = append(ids, m.Spec.ProviderID)
			}
		}
		return ids
	}
}

// clusterObjects is a Cluster named name on a PacketCluster with a
// MachineDeployment whose machines carry the simulator's nodes VLAN,
// addresses from a MetalVRFIPPool, and bootstrap data from a Secret (no
// bootstrap provider). Written out in full: CAPI's defaulting webhooks are
// not installed.
func clusterObjects(ns, name string) []client.Object {
	labels := map[string]string{clusterv1.ClusterNameLabel: name, clusterv1.MachineDeploymentNameLabel: deployment}
	return []client.Object{
		&v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodes"},
			Spec:       v1alpha1.MetalVRFIPPoolSpec{Addresses: []string{"10.60.1.2-10.60.1.6"}, Prefix: ptr.To[int32](29), Gateway: "10.60.1.1"},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bootstrap"},
			Data:       map[string][]byte{"value": []byte("#cloud-config\nruncmd:\n  - echo joined\n"), "format": []byte("cloud-config")},
		},
		&infrav1.PacketCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: infrav1.PacketClusterSpec{
				ProjectID: simtest.Project, Metro: simtest.Metro,
				ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "10.60.1.1", Port: 6443},
			},
		},
		&clusterv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: clusterv1.ClusterSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "PacketCluster", Name: name,
				},
			},
		},
		&infrav1.PacketMachineTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: deployment},
			Spec: infrav1.PacketMachineTemplateSpec{Template: infrav1.PacketMachineTemplateResource{Spec: infrav1.PacketMachineSpec{
				MachineType: "c3.small.x86", OS: "ubuntu_24_04",
				Ports: []infrav1.Port{{Name: "bond0", Networks: []infrav1.Network{{
					VXLAN: simtest.NodesVXLAN, AddressType: infrav1.AddressTypeInternal,
					AddressFromPool: &corev1.TypedLocalObjectReference{
						APIGroup: ptr.To(v1alpha1.GroupVersion.Group), Kind: v1alpha1.MetalVRFIPPoolKind, Name: "nodes",
					},
				}}}},
			}}},
		},
		&clusterv1.MachineDeployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: deployment, Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
			Spec: clusterv1.MachineDeploymentSpec{
				ClusterName: name,
				Replicas:    ptr.To[int32](0),
				Selector:    metav1.LabelSelector{MatchLabels: labels},
				Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{
					Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
					RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{
						MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0)),
					},
				}},
				Template: clusterv1.MachineTemplateSpec{
					ObjectMeta: clusterv1.ObjectMeta{Labels: labels},
					Spec: clusterv1.MachineSpec{
						ClusterName: name,
						Version:     "v1.36.3",
						Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap")},
						InfrastructureRef: clusterv1.ContractVersionedObjectReference{
							APIGroup: infrav1.GroupVersion.Group, Kind: "PacketMachineTemplate", Name: deployment,
						},
					},
				},
			},
		},
	}
}

// flavorAddons renders the default flavor for the Cluster name in ns with
// clusterctl (from the template file, as a user may) and returns its
// ClusterResourceSets and their ConfigMaps, and the labels of its Cluster,
// which they select it by.
func flavorAddons(t *testing.T, g Gomega, env *testenv.Environment, ns, name string) ([]client.Object, map[string]string) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(env.WriteKubeconfig(kubeconfig)).To(Succeed())
	home := t.TempDir()
	out, err := testenv.RunTool(env.Root, []string{
		"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "CLUSTERCTL_DISABLE_VERSIONCHECK=true",
		"PROJECT_ID=" + simtest.Project, "METRO=" + simtest.Metro, "SSH_KEY=ssh-ed25519 AAAA flow",
	}, tool(t, "CLUSTERCTL", "clusterctl"), "generate", "cluster", name, "--from", filepath.Join(env.Root, "templates", "cluster-template.yaml"),
		"--target-namespace", ns, "--kubernetes-version", "v1.36.3", "--kubeconfig", kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	rendered, err := testenv.DecodeObjects(bytes.NewReader(out))
	g.Expect(err).NotTo(HaveOccurred())
	var addons []client.Object
	var labels map[string]string
	for _, obj := range rendered {
		switch obj.GetKind() {
		case "ClusterResourceSet", "ConfigMap":
			addons = append(addons, obj)
		case "Cluster":
			labels = obj.GetLabels()
		}
	}
	g.Expect(addons).To(HaveLen(3), "two ClusterResourceSets and the cloud controller manager's ConfigMap")
	return addons, labels
}

// poolUsed is how many addresses the nodes pool of namespace ns reports in use.
func poolUsed(ctx context.Context, k8s client.Client, ns string) func() int64 {
	return used(ctx, k8s, &v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodes"}})
}

// used is how many addresses pool (named by its namespace and name) reports
// in use; -1 before it says.
func used(ctx context.Context, k8s client.Client, pool v1alpha1.Pool) func() int64 {
	return func() int64 {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil || pool.PoolStatus().IPAddresses == nil {
			return -1
		}
		return pool.PoolStatus().IPAddresses.Used
	}
}

// tool is the path of a program `make test` builds into bin/tools and names
// in $env.
func tool(t *testing.T, env, name string) string {
	t.Helper()
	path, err := testenv.Tool(env, name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}
