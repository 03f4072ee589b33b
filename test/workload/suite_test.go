package workload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/test/framework"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/workload/emulator"
)

// suite is what the tests share, as they run one after the other: one
// platform (the Metal API simulator), one local clusterctl repository, one
// management cluster made with `clusterctl init` (where every cluster is
// created, and from which TestDefaultFlavor moves its own), and one
// emulator making the platform's devices nodes. Sharing them saves the
// seconds each would take to start, per test.
var suite struct {
	metalAPI *metal.Client
	sim      *simtest.Sim
	simURL   string
	// clusterctl is the binary, config the configuration naming the local
	// repository, and ctlEnv the environment it runs in (a HOME of its own).
	clusterctl, config string
	ctlEnv             []string
	// home is clusterctl's HOME, beside the repository and kubeconfigs.
	home, kustomize string
	// logs is where every manager run as a process and the garbage
	// collectors write.
	logs    *os.File
	source  *management
	runner  *emulator.Runner
	runDone chan error
	// amend is what the emulator reads a device through, when set (see
	// emulator.Runner.Amend): a test's fault.
	amend atomic.Pointer[func(emulator.Device) emulator.Device]
}

// runSuite starts what the tests share, runs them and stops it.
func runSuite(m interface{ Run() int }) (code int, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stops []func()
	defer func() {
		for _, stop := range slices.Backward(stops) {
			stop()
		}
	}()
	s, err := simtest.Start(sim.Options{DeviceProvisionDelay: 2 * time.Second, BatchDelay: time.Second, DeviceDeprovisionDelay: time.Second}, nil)
	if err != nil {
		return 0, err
	}
	stops = append(stops, s.Close)
	suite.sim, suite.simURL = s, s.URL
	if suite.metalAPI, err = metal.NewClient(metal.Config{APIKey: simtest.APIKey, BaseURL: s.URL, ProjectID: simtest.Project}); err != nil {
		return 0, err
	}
	if suite.logs, err = os.CreateTemp("", "workload-managers-*.log"); err != nil {
		return 0, err
	}
	defer func() {
		if code != 0 || err != nil {
			fmt.Printf("the managers' logs are in %s\n", suite.logs.Name())
		} else {
			_ = os.Remove(suite.logs.Name())
		}
	}()
	if suite.home, err = os.MkdirTemp("", "workload-clusterctl-"); err != nil {
		return 0, err
	}
	stops = append(stops, func() { _ = os.RemoveAll(suite.home) })
	if suite.clusterctl, err = testenv.Tool("CLUSTERCTL", "clusterctl"); err != nil {
		return 0, err
	}
	if suite.kustomize, err = testenv.Tool("KUSTOMIZE", "kustomize"); err != nil {
		return 0, err
	}
	suite.ctlEnv = []string{"HOME=" + suite.home, "XDG_CONFIG_HOME=" + filepath.Join(suite.home, ".config"), "CLUSTERCTL_DISABLE_VERSIONCHECK=true"}
	source, stop, err := startManagement(ctx, "source", true)
	if stop != nil {
		stops = append(stops, stop)
	}
	if err != nil {
		return 0, fmt.Errorf("starting the management cluster: %w", err)
	}
	suite.source = source
	suite.runner = &emulator.Runner{Metal: suite.metalAPI, SimURL: suite.simURL, Management: source.k8s, Log: ctrl.Log.WithName("emulator"),
		Amend: func(d emulator.Device) emulator.Device {
			if amend := suite.amend.Load(); amend != nil {
				return (*amend)(d)
			}
			return d
		},
		// TestRealNodes' devices boot as machines (test/nodeagent).
		Ignore: func(d emulator.Device) bool { return strings.HasPrefix(d.Hostname, realPrefix) }}
	suite.runDone = make(chan error, 1)
	runCtx, stopRunner := context.WithCancel(ctx)
	go func() { suite.runDone <- suite.runner.Run(runCtx) }()
	stops = append(stops, func() { stopRunner(); <-suite.runDone })
	return m.Run(), nil
}

// management is a management cluster as a user makes one: an API server
// (envtest) with Kubernetes' garbage collector and namespace controller
// beside it, initialized with `clusterctl init` from the local repository
// (our providers and Cluster API's core, kubeadm bootstrap and control
// plane: clusterctl move reads this inventory on both sides and moves only
// the kinds of the CRDs clusterctl installed). The managers run beside it,
// not in the Deployments init created (no Pod runs in envtest): ours in
// this process, Cluster API's as processes (built by `make test-workload`
// from test/tools/capi-core and test/tools/capi-providers). Only our IPAM
// provider's webhooks are served (they record the addresses a move
// creates); the others are deleted, so the test sets the one default the
// flavors lack (the MachineDeployment's rollout strategy).
type management struct {
	name       string
	env        *testenv.Environment
	k8s        client.Client
	kubeconfig string
	scheme     *runtime.Scheme
}

// proxy is the management cluster for Cluster API's e2e framework, made in
// a test: it asserts with the global Gomega a test registers (newG).
func (m *management) proxy() framework.ClusterProxy {
	return framework.NewClusterProxy(m.name, m.kubeconfig, m.scheme)
}

// startManagement starts a management cluster named name, with the
// in-cluster IPAM provider (CRDs and manager: the incluster flavor's pools)
// when inCluster is set. The first writes the local repository. stop, when
// not nil, stops what started.
func startManagement(ctx context.Context, name string, inCluster bool) (m *management, stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, stop := range slices.Backward(stops) {
			stop()
		}
	}
	m = &management{name: name, kubeconfig: filepath.Join(suite.home, name+".kubeconfig")}
	if m.env, err = testenv.Start(testenv.Options{Empty: true, InClusterCRDs: inCluster}); err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { _ = m.env.Stop() })
	var logs io.Writer = suite.logs
	stopCollector, err := m.env.StartGarbageCollector(ctx, logs)
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, stopCollector)
	if suite.config == "" {
		// Our providers as `make release` publishes them, Cluster API's
		// core, kubeadm bootstrap and control plane from the pinned module.
		if suite.config, err = testenv.WriteClusterctlRepository(m.env.Root, filepath.Join(suite.home, "repository"), suite.kustomize, true); err != nil {
			return nil, stop, err
		}
	}
	if err := errors.Join(testenv.InstallCertManagerCRDs(m.env.Config), m.env.WriteKubeconfig(m.kubeconfig)); err != nil {
		return nil, stop, err
	}
	if _, err := testenv.RunTool("", suite.ctlEnv, suite.clusterctl, "init", "--kubeconfig", m.kubeconfig, "--config", suite.config,
		"--core", "cluster-api", "--bootstrap", "kubeadm", "--control-plane", "kubeadm",
		"--infrastructure", "packet", "--ipam", "metal-vrf"); err != nil {
		return nil, stop, err
	}
	if err := m.env.ServeIPAMWebhooks(ctx); err != nil {
		return nil, stop, err
	}
	stopIPAM, err := m.env.StartIPAM(ctx, m.env.IPAMOptions(4))
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, stopIPAM)
	cappOpts := m.env.CAPPOptions(4, metadataURL)
	cappOpts.Getenv = func(name string) string {
		return map[string]string{metal.EnvAPIKey: simtest.APIKey, metal.EnvBaseURL: suite.simURL}[name]
	}
	stopCAPP, err := m.env.StartCAPP(ctx, cappOpts)
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, stopCAPP)
	for _, p := range []struct{ envVar, name string }{
		{"CAPI_MANAGER", "capi-core-manager"},
		{"CAPI_KUBEADM_BOOTSTRAP_MANAGER", "capi-kubeadm-bootstrap-manager"},
		{"CAPI_KUBEADM_CONTROL_PLANE_MANAGER", "capi-kubeadm-control-plane-manager"},
	} {
		stopManager, err := m.env.StartCAPIManager(p.envVar, p.name, logs)
		if err != nil {
			return nil, stop, err
		}
		stops = append(stops, stopManager)
	}
	if inCluster {
		stopInCluster, err := m.env.StartInCluster(logs)
		if err != nil {
			return nil, stop, err
		}
		stops = append(stops, stopInCluster)
	}
	if m.scheme, err = testenv.Scheme(); err != nil {
		return nil, stop, err
	}
	if err := errors.Join(controlplanev1.AddToScheme(m.scheme), bootstrapv1.AddToScheme(m.scheme)); err != nil {
		return nil, stop, err
	}
	if m.k8s, err = client.New(m.env.Config, client.Options{Scheme: m.scheme}); err != nil {
		return nil, stop, err
	}
	return m, stop, nil
}

// renderFlavor renders a flavor of templates/ (the default for "") for one
// control plane and one worker, on the simulator's nodes VLAN and its VRF's
// nodes range, with `clusterctl generate cluster` from the template file as
// a user may, and applies edits to the objects.
func renderFlavor(m *management, cluster, flavor, ns string, edits []func(*unstructured.Unstructured) error) ([]client.Object, error) {
	template := "cluster-template.yaml"
	if flavor != "" {
		template = "cluster-template-" + flavor + ".yaml"
	}
	out, err := testenv.RunTool(m.env.Root, append(slices.Clone(suite.ctlEnv),
		"PROJECT_ID="+simtest.Project, "METRO="+simtest.Metro, "SSH_KEY=ssh-ed25519 AAAA workload",
		// The cloud controller manager's image in the node layer
		// (test/node/kubelayer.sh): only real nodes run it.
		"CCM_IMAGE="+ccmImage,
		"NODE_VXLAN=1001", "NODE_NETWORK_ADDRESSES=10.60.1.2-10.60.1.6", "NODE_NETWORK_PREFIX=29", "NODE_NETWORK_GATEWAY=10.60.1.1",
	), suite.clusterctl, "generate", "cluster", cluster, "--from", filepath.Join(m.env.Root, "templates", template),
		"--target-namespace", ns, "--kubernetes-version", version, "--control-plane-machine-count", "1", "--worker-machine-count", "1",
		"--kubeconfig", m.kubeconfig)
	if err != nil {
		return nil, err
	}
	rendered, err := testenv.DecodeObjects(bytes.NewReader(out))
	if err != nil {
		return nil, err
	}
	objs := make([]client.Object, len(rendered))
	for i, obj := range rendered {
		if obj.GetKind() == "MachineDeployment" {
			if err := defaultRollout(obj); err != nil {
				return nil, err
			}
		}
		for _, edit := range edits {
			if err := edit(obj); err != nil {
				return nil, fmt.Errorf("editing %s %s: %w", obj.GetKind(), obj.GetName(), err)
			}
		}
		objs[i] = obj
	}
	return objs, nil
}
