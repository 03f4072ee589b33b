// Package ccm runs the cloud controller manager (ccm/, the binary the
// flavors install) as a process on a real kube-apiserver, as the
// ServiceAccount of the default flavor with the flavor's RBAC, arguments
// and environment, against the Metal API simulator: it must initialise
// nodes registered with kubelet's cloud-provider: external (taint removed,
// provider ID, labels, addresses), taint the node of a powered-off device
// and delete the node of a deleted device.
package ccm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drone/envsubst/v2"
	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/metal-vrf/cluster-api-metal-vrf/ccm/cloud"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// account is the flavor's ServiceAccount, as the API server names it.
const account = "system:serviceaccount:kube-system:cloud-controller-manager"

var (
	env      *testenv.Environment
	metalSim *simtest.Sim
	binary   string
	setupErr error
)

func TestMain(m *testing.M) { testenv.RunMain(m, start, &setupErr) }

// start starts the simulator and the API server, and builds the binary.
func start(context.Context) (stops []func(), err error) {
	metalSim, err = simtest.Start(sim.Options{}, nil)
	if err != nil {
		return nil, err
	}
	stops = append(stops, metalSim.Close)
	env, err = testenv.Start(testenv.Options{Empty: true})
	if err != nil {
		return stops, err
	}
	stops = append(stops, func() { _ = env.Stop() })
	dir, err := os.MkdirTemp("", "metal-vrf-ccm-")
	if err != nil {
		return stops, err
	}
	stops = append(stops, func() { _ = os.RemoveAll(dir) })
	binary = filepath.Join(dir, "metal-vrf-ccm")
	build := exec.Command("go", "build", "-o", binary, "github.com/metal-vrf/cluster-api-metal-vrf/ccm")
	if out, err := build.CombinedOutput(); err != nil {
		return stops, fmt.Errorf("building the cloud controller manager: %w\n%s", err, out)
	}
	return stops, nil
}

func TestTheFlavorsCloudControllerManagerInitialisesNodes(t *testing.T) {
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	g := NewWithT(t)
	ctx := context.Background()
	admin := env.Client
	nodes := kubernetes.NewForConfigOrDie(env.Config).CoreV1().Nodes()

	deployment := installFlavorManifest(t, g, ctx, admin)
	container := deployment.Spec.Template.Spec.Containers[0]

	devices, err := metal.NewClient(metal.Config{APIKey: simtest.APIKey, ProjectID: simtest.Project, BaseURL: metalSim.URL})
	g.Expect(err).NotTo(HaveOccurred())
	newDevice := func(hostname, facility string) *metalv1.Device {
		d, err := devices.CreateDevice(ctx, metal.DeviceRequest{Tag: "ccm-e2e:" + hostname, Hostname: hostname,
			Plan: "m3.small.x86", Metro: simtest.Metro, Facility: facility, OperatingSystem: "ubuntu_24_04"})
		g.Expect(err).NotTo(HaveOccurred())
		return d
	}
	a := newDevice("node-a", simtest.ReservedFacility)
	b := newDevice("node-b", "")

	// Nodes as kubelet registers them with cloud-provider: external:
	// tainted, node-a with --provider-id and --node-ip (its VLAN address),
	// node-b with neither.
	uninitialized := corev1.Taint{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: corev1.TaintEffectNoSchedule}
	for _, n := range []*corev1.Node{{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", Annotations: map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: "10.60.0.5"}},
		Spec:       corev1.NodeSpec{ProviderID: cloud.ProviderID(a.GetId()), Taints: []corev1.Taint{uninitialized}},
	}, {
		ObjectMeta: metav1.ObjectMeta{Name: "node-b"},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{uninitialized}},
	}} {
		created, err := nodes.Create(ctx, n, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: n.Name}}
		if ip := n.Annotations[cloudproviderapi.AnnotationAlphaProvidedIPAddr]; ip != "" {
			created.Status.Addresses = append(created.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
		_, err = nodes.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}

	stop, logs := run(t, container)
	defer stop()
	defer func() {
		if t.Failed() {
			t.Logf("the cloud controller manager's log:\n%s", logs())
		}
	}()

	var public string
	for _, ip := range a.GetIpAddresses() {
		if ip.GetPublic() && ip.GetAddressFamily() == 4 {
			public = ip.GetAddress()
		}
	}
	g.Eventually(func(g Gomega) {
		n, err := nodes.Get(ctx, "node-a", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.Spec.Taints).NotTo(ContainElement(HaveField("Key", cloudproviderapi.TaintExternalCloudProvider)))
		g.Expect(n.Labels).To(HaveKeyWithValue(corev1.LabelInstanceTypeStable, "m3.small.x86"))
		g.Expect(n.Labels).To(HaveKeyWithValue(corev1.LabelTopologyRegion, simtest.Metro))
		g.Expect(n.Labels).To(HaveKeyWithValue(corev1.LabelTopologyZone, simtest.ReservedFacility))
		// kubelet's node IP is the InternalIP; the device's private
		// address, of the same type, gives way to it.
		g.Expect(n.Status.Addresses).To(Equal([]corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.60.0.5"},
			{Type: corev1.NodeExternalIP, Address: public},
			{Type: corev1.NodeExternalIP, Address: a.GetIpAddresses()[2].GetAddress()},
			{Type: corev1.NodeHostName, Address: "node-a"},
		}))
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) {
		n, err := nodes.Get(ctx, "node-b", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.Spec.Taints).NotTo(ContainElement(HaveField("Key", cloudproviderapi.TaintExternalCloudProvider)))
		g.Expect(n.Spec.ProviderID).To(Equal(cloud.ProviderID(b.GetId())), "found by its name")
		g.Expect(n.Labels).To(HaveKeyWithValue(corev1.LabelTopologyZone, b.Facility.GetCode()), "created in the metro, placed in one of its facilities")
		g.Expect(b.Facility.GetCode()).To(HavePrefix(simtest.Metro))
	}, time.Minute, 200*time.Millisecond).Should(Succeed())

	// The node lifecycle controller looks at nodes that are not Ready
	// (these never were): a powered-off device's node is tainted, a deleted
	// device's node is deleted.
	api := simtest.SDK(metalSim.URL, simtest.APIKey)
	_, err = api.DevicesApi.PerformAction(ctx, b.GetId()).
		DeviceActionInput(metalv1.DeviceActionInput{Type: metalv1.DEVICEACTIONINPUTTYPE_POWER_OFF}).Execute()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(devices.DeleteDevice(ctx, a.GetId())).To(Succeed())
	g.Eventually(func() bool {
		_, err := nodes.Get(ctx, "node-a", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, time.Minute, 200*time.Millisecond).Should(BeTrue(), "the node of the deleted device is deleted")
	g.Eventually(func(g Gomega) {
		n, err := nodes.Get(ctx, "node-b", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.Spec.Taints).To(ContainElement(HaveField("Key", cloudproviderapi.TaintNodeShutdown)))
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
}

// installFlavorManifest applies the cloud controller manager's
// ServiceAccount and RBAC from the ConfigMap of the default flavor, rendered
// as clusterctl would with PROJECT_ID set to the simulator's project, and
// returns its Deployment.
func installFlavorManifest(t *testing.T, g Gomega, ctx context.Context, admin client.Client) *appsv1.Deployment {
	t.Helper()
	template, err := testenv.ReadObjects(filepath.Join("..", "..", "..", "templates", "cluster-template.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var manifest string
	for _, obj := range template {
		if obj.GetKind() == "ConfigMap" && obj.GetName() == "${CLUSTER_NAME}-ccm" {
			manifest, _, _ = unstructured.NestedString(obj.Object, "data", "ccm.yaml")
		}
	}
	g.Expect(manifest).NotTo(BeEmpty(), "the flavor's ConfigMap ${CLUSTER_NAME}-ccm with ccm.yaml")
	rendered, err := envsubst.Eval(manifest, func(name string) string {
		return map[string]string{"PROJECT_ID": simtest.Project}[name]
	})
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := testenv.DecodeObjects(strings.NewReader(rendered))
	g.Expect(err).NotTo(HaveOccurred())
	var deployment *appsv1.Deployment
	for _, obj := range objs {
		if obj.GetKind() == "Deployment" {
			deployment = &appsv1.Deployment{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, deployment)).To(Succeed())
			continue
		}
		g.Expect(admin.Create(ctx, obj)).To(Succeed())
	}
	g.Expect(deployment).NotTo(BeNil())
	g.Expect(deployment.Spec.Template.Spec.ServiceAccountName).To(Equal("cloud-controller-manager"))
	g.Expect(deployment.Spec.Template.Spec.Containers).To(HaveLen(1))
	return deployment
}

// run starts the binary as the container would run: its arguments, with the
// cloud config (the token and the simulator's URL, as a user of the
// simulator writes it into the Secret metal-cloud-config) at the path the
// container mounts it, its environment and nothing else of the test's; plus
// a kubeconfig of its ServiceAccount, no secure port (the test's machine
// serves others), and the node monitor period shortened.
func run(t *testing.T, container corev1.Container) (stop func(), logs func() string) {
	t.Helper()
	dir := t.TempDir()
	cloudConfig, err := json.Marshal(map[string]string{"apiKey": simtest.APIKey, "baseURL": metalSim.URL})
	if err != nil {
		t.Fatal(err)
	}
	configPath := filepath.Join(dir, "cloud-sa.json")
	if err := os.WriteFile(configPath, cloudConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := filepath.Join(dir, "kubeconfig")
	serviceAccount := envtest.User{Name: account, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system"}}
	if err := env.WriteKubeconfigOf(kubeconfigPath, serviceAccount); err != nil {
		t.Fatal(err)
	}

	var args []string
	for _, arg := range container.Args {
		if strings.HasPrefix(arg, "--cloud-config=") {
			arg = "--cloud-config=" + configPath
		}
		args = append(args, arg)
	}
	args = append(args, "--kubeconfig="+kubeconfigPath, "--secure-port=0", "--node-monitor-period=1s")
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range container.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	logPath := filepath.Join(dir, "ccm.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return func() {
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
			_ = logFile.Close()
		}, func() string {
			out, _ := os.ReadFile(logPath)
			return string(out)
		}
}
