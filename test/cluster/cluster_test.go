// Package cluster_test installs both providers with `clusterctl init` on a
// real one-node management cluster that runs their images (make
// test-cluster; docs/cluster.md): a control plane built from
// k8s.io/kubernetes, a kubelet on Debian's containerd and runc, Pods on a CNI
// bridge, Services through kube-proxy, images pulled from a local registry.
// Everything runs in network, mount and pid namespaces the test makes, so
// its traffic stays in them and nothing it starts outlives it.
package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipamv1alpha1 "github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// insideEnv carries the test's folder into the namespaced run of the test.
const insideEnv = "CLUSTER_TEST_DIR"

// stopFile, in the test's folder, tells a kept cluster to stop.
const stopFile = "stop"

// The providers' namespaces, as `clusterctl init` installs them.
var providerNamespaces = []string{
	"capi-system", "capi-kubeadm-bootstrap-system", "capi-kubeadm-control-plane-system",
	"ipam-metal-vrf-system", "cluster-api-provider-packet-system",
}

// installedNamespaces are every namespace `clusterctl init` installs into:
// cert-manager's and the providers'. A test that installs more (the
// operator's) adds to its cluster's namespaces.
var installedNamespaces = append([]string{certManagerNamespace}, providerNamespaces...)

func TestCluster(t *testing.T) {
	isolated(t, "TestCluster", func(ctx context.Context, t *testing.T, c *cluster) {
		start := time.Now()
		c.clusterctl(t, "init", "--infrastructure", "packet", "--ipam", "metal-vrf")
		t.Logf("clusterctl init returned after %s", time.Since(start).Round(time.Second))
		c.waitAvailable(ctx, t)
		t.Logf("BENCHMARK clusterctl init to every Deployment Available: %s", time.Since(start).Round(time.Second))

		t.Run("the webhooks' certificates are cert-manager's", func(t *testing.T) { checkCertificates(ctx, t, c.k8s) })
		t.Run("webhooks refuse through their Services", func(t *testing.T) { checkWebhooks(ctx, t, c.k8s, c.cfg) })
		t.Run("leader election Leases are held by Pods", func(t *testing.T) { checkLeases(ctx, t, c.k8s) })
		t.Run("metrics are served", func(t *testing.T) { checkMetrics(ctx, t, c.k8s, c.cfg) })
		t.Run("the security context holds in the runtime", func(t *testing.T) { checkSecurityContext(ctx, t, c.k8s) })
		t.Run("the ServiceAccounts have the rights docs/install.md lists", func(t *testing.T) { checkRights(ctx, t, c.k8s) })
		logRSS(ctx, t, c.k8s, "after the checks")

		t.Run("the flow: a MachineDeployment of the default flavor on the simulator", func(t *testing.T) {
			f := newFlow(t, c)
			f.create(ctx, t)
			f.waitMachines(ctx, t, 3)
			t.Log("3 machines on active devices, bond0 carrying VLAN 1001, their claims bound")
			t.Run("the IPAM manager's Pod deleted while claims are created", func(t *testing.T) { f.takeOver(ctx, t) })
			t.Run("claims deleted in the foreground, background and orphaning, by the garbage collector", func(t *testing.T) { f.deletions(ctx, t) })
			t.Run("a global pool's address retired after the garbage collector stripped its claim's owner reference", func(t *testing.T) { f.retirement(ctx, t) })
			if os.Getenv(keepEnv) != "" {
				f.keep(ctx, t)
			}
			t.Run("scale to 0 and delete the Cluster", func(t *testing.T) { f.scaleToZero(ctx, t) })
		})
		logRSS(ctx, t, c.k8s, "after the flow")
	})
}

// isolated runs the test named name again as the first process of new
// network, mount and pid namespaces, where inside gets a running cluster:
// when it ends, the kernel ends every process it started (containers
// included) and drops its mounts and network. Then it checks that nothing is
// left.
func isolated(t *testing.T, name string, inside func(context.Context, *testing.T, *cluster)) {
	if os.Getenv("REQUIRE_CLUSTER") == "" {
		t.Skip("make test-cluster runs this (REQUIRE_CLUSTER=1): it needs root and the programs the Makefile builds")
	}
	if dir := os.Getenv(insideEnv); dir != "" {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		inside(ctx, t, startCluster(ctx, t, dir))
		return
	}
	dir := t.TempDir()
	t.Cleanup(removeCgroups)
	timeout := "40m"
	if os.Getenv(keepEnv) != "" {
		timeout = "0"
	}
	cmd := exec.Command("unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child",
		os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1", "-test.timeout="+timeout)
	cmd.Env = append(os.Environ(), insideEnv+"="+dir)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Getenv(keepEnv) != "" {
		// Ctrl-C reaches this process only: it asks the namespaced run to
		// stop, which then tears the cluster down as a test run does.
		cmd.SysProcAttr.Setpgid = true
		interrupted := make(chan os.Signal, 1)
		signal.Notify(interrupted, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(interrupted)
		go func() {
			<-interrupted
			_ = os.WriteFile(filepath.Join(dir, stopFile), nil, 0o644)
		}()
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if os.Getenv(keepEnv) != "" {
		fmt.Printf("To reach the cluster, run commands in its network namespace: nsenter --target %d --net -- COMMAND\n", cmd.Process.Pid)
	}
	beforeLogs := prefix(out)
	err := cmd.Wait()
	removeCgroups()
	checkNothingLeft(t, dir)
	if err != nil {
		t.Fatalf("the cluster test failed (%v); its logs are above and each program's in %s/logs while the test runs. What it printed last before the Pods' logs:\n%s",
			err, dir, strings.Join(beforeLogs, "\n"))
	}
}

// prefix copies the namespaced run's output, indented so that it reads as
// this test's, and returns its last lines before the Pods' logs
// (dumpPodLogs): a failure's message, which a reader of only the end of a
// long output would otherwise not see.
func prefix(r io.Reader) []string {
	const kept = 12
	var last []string
	dumping := false
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		fmt.Println("    | " + line)
		if dumping = dumping || strings.Contains(line, podLogsHeading); !dumping {
			last = append(last[max(0, len(last)+1-kept):], line)
		}
	}
	return last
}

// checkNothingLeft fails the test for any process, mount or network device
// of the cluster still there.
func checkNothingLeft(t *testing.T, dir string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(cmdline), dir) {
			t.Errorf("process left behind: %s", strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, dir) || strings.Contains(line, " /run/containerd") || strings.Contains(line, " /run/netns/") {
			t.Errorf("mount left behind: %s", line)
		}
	}
	for _, dev := range []string{"cni0"} {
		if _, err := os.Stat("/sys/class/net/" + dev); err == nil {
			t.Errorf("network device %s left behind in the machine's network namespace", dev)
		}
	}
	if netns, _ := filepath.Glob("/run/netns/cni-*"); len(netns) > 0 {
		t.Errorf("network namespaces left behind: %v", netns)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*" + cgroupRoot); len(left) > 0 {
		t.Errorf("cgroups left behind: %v", left)
	}
}

// removeCgroups removes the Pods' cgroups, deepest first, once their
// processes are gone.
func removeCgroups() {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*" + cgroupRoot)
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			for try := 0; try < 20; try++ {
				if err := syscall.Rmdir(dirs[i]); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(250 * time.Millisecond) // the kernel is still ending its processes
			}
		}
	}
}

// cluster is a running one-node management cluster with the simulator
// Serving and a local clusterctl repository, before any provider is
// installed.
type cluster struct {
	dir, root  string
	kubeconfig string
	configPath string
	// ctlEnv is clusterctl's environment: its own home, and the variables
	// the providers' components name.
	ctlEnv []string
	cfg    *rest.Config
	k8s    client.Client
	n      *node
	// namespaces are those the installation under test installs into: the
	// checks wait for their Deployments, fail for their stuck Pods and
	// print their logs.
	namespaces []string
}

func startCluster(ctx context.Context, t *testing.T, dir string) *cluster {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	isolate(t)
	n := &node{t: t, dir: dir, bin: os.Getenv("CLUSTER_BIN")}
	c := &cluster{dir: dir, root: root, n: n, namespaces: slices.Clone(installedNamespaces)}
	kubeconfig := n.startControlPlane(os.Getenv("KUBEBUILDER_ASSETS"))
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 5*time.Minute, "the API server is ready", func() error {
		if err := n.exited(); err != nil {
			t.Fatal(err)
		}
		if out, err := clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
			return fmt.Errorf("%w: %s\n%s", err, out, n.logTail("kube-apiserver"))
		}
		return nil
	})
	n.startControllers(kubeconfig)

	n.startNode(ctx, kubeconfig)
	pushImages(ctx, t)
	waitFor(ctx, t, 5*time.Minute, "the node is Ready", func() error {
		if err := n.exited(); err != nil {
			t.Fatal(err)
		}
		node := &corev1.Node{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: "node"}, node); err != nil {
			return fmt.Errorf("%w\n%s", err, n.logTail("kubelet"))
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node conditions %v\n%s", node.Status.Conditions, n.logTail("kubelet"))
	})
	t.Log("node Ready")
	t.Cleanup(func() {
		if t.Failed() {
			dumpPodLogs(t, c.namespaces)
		}
	})
	startSimulator(ctx, t, k8s)

	home := filepath.Join(dir, "home")
	c.kubeconfig, c.configPath = kubeconfig, writeRepository(t, root, dir)
	c.ctlEnv = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"CLUSTERCTL_DISABLE_VERSIONCHECK=true", "METAL_API_KEY=cluster-test-token", "METAL_API_URL=" + simURL}
	c.cfg, c.k8s = cfg, k8s
	return c
}

// clusterctl runs clusterctl on the cluster with the local repository.
func (c *cluster) clusterctl(t *testing.T, args ...string) {
	t.Helper()
	run(t, c.ctlEnv, os.Getenv("CLUSTERCTL"), append(args, "--kubeconfig", c.kubeconfig, "--config", c.configPath)...)
}

// waitAvailable waits until every installed Deployment is Available and
// every webhook serves the certificate its configuration trusts: until
// then the API server refuses whatever a webhook judges (a Certificate
// issued twice at install reaches the Pod after its configuration; see
// checkCertificates).
func (c *cluster) waitAvailable(ctx context.Context, t *testing.T) {
	c.waitAvailableIn(ctx, t, "every provider's Deployment is Available", c.namespaces)
	waitFor(ctx, t, 3*time.Minute, "every webhook serves, through its Service, the certificate its configuration trusts", func() error {
		_, err := webhooksServing(ctx, c.k8s)
		return err
	})
}

// waitAvailableIn waits until every Deployment of the namespaces is
// Available, and fails at once for a Pod of the cluster's namespaces that
// cannot start.
func (c *cluster) waitAvailableIn(ctx context.Context, t *testing.T, what string, namespaces []string) {
	waitFor(ctx, t, 10*time.Minute, what, func() error {
		if err := c.n.exited(); err != nil {
			t.Fatal(err)
		}
		if err := stuck(ctx, c.k8s, c.namespaces); err != nil {
			t.Fatal(err)
		}
		return deploymentsAvailable(ctx, c.k8s, namespaces)
	})
}

// podLogsHeading begins each log dumpPodLogs prints.
const podLogsHeading = "the Pod log's last"

// dumpPodLogs prints the end of each container log of the Pods of the
// namespaces and the simulator's (the kubelet writes them under
// /var/log/pods, the test's own tmpfs).
func dumpPodLogs(t *testing.T, namespaces []string) {
	for _, ns := range append(slices.Clone(namespaces), simNamespace) {
		logs, _ := filepath.Glob(filepath.Join("/var/log/pods", ns+"_*", "*", "*.log"))
		for _, log := range logs {
			data, err := os.ReadFile(log)
			if err != nil {
				continue
			}
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			lines = lines[max(0, len(lines)-40):]
			t.Logf(podLogsHeading+" %d lines of %s:\n%s", len(lines), log, strings.Join(lines, "\n"))
		}
	}
}

// pushImages pushes every image the Makefile built to the node's registry,
// under the name each archive records; the node pulls them from there.
func pushImages(ctx context.Context, t *testing.T) {
	archives, _ := filepath.Glob(filepath.Join(os.Getenv("CLUSTER_IMAGES"), "*.tar"))
	ours, _ := filepath.Glob(filepath.Join(os.Getenv("CLUSTER_RELEASE"), "images", "*.tar"))
	archives = append(archives, ours...)
	// make test-upgrade's previous release, tagged with its version.
	previous, _ := filepath.Glob(filepath.Join(os.Getenv("CLUSTER_PREVIOUS"), "images", "*.tar"))
	archives = append(archives, previous...)
	if len(archives) < 7 {
		t.Fatalf("want the pause, cert-manager, Cluster API and our images in $CLUSTER_IMAGES and $CLUSTER_RELEASE/images, found %v", archives)
	}
	for _, archive := range archives {
		pushImage(ctx, t, archive)
	}
}

// pushImage pushes one image archive to the node's registry.
func pushImage(ctx context.Context, t *testing.T, archive string) {
	waitFor(ctx, t, time.Minute, "pushing "+filepath.Base(archive), func() error {
		out, err := exec.Command(os.Getenv("IMAGEBUILD"), "push", "--archive", archive, "--insecure").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	})
}

// capiImageRepository is where the Makefile built Cluster API's images, as
// <it>/<the image name the components give>:<Cluster API's version>.
const capiImageRepository = registry + "/cluster-api"

// repositoryDir is the local clusterctl repository's folder in the test's.
const repositoryDir = "repository"

// writeRepository writes the local clusterctl repository with the
// components and cluster templates `make release` wrote (the components
// naming the images pushed above) and a
// configuration whose image overrides point Cluster API's providers at the
// images built from its module.
func writeRepository(t *testing.T, root, dir string) string {
	repo := filepath.Join(dir, repositoryDir)
	configPath, err := testenv.WriteClusterctlRepository(root, repo, os.Getenv("KUSTOMIZE"), true)
	if err != nil {
		t.Fatal(err)
	}
	release := os.Getenv("CLUSTER_RELEASE")
	files := map[string]string{"ipam-components.yaml": "ipam-metal-vrf", "infrastructure-components.yaml": "infrastructure-packet"}
	templates, _ := filepath.Glob(filepath.Join(release, "cluster-template*.yaml"))
	if len(templates) == 0 {
		t.Fatalf("no cluster templates in %s", release)
	}
	for _, template := range templates {
		files[filepath.Base(template)] = "infrastructure-packet"
	}
	for file, label := range files {
		data, err := os.ReadFile(filepath.Join(release, file))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, label, testenv.LocalVersion, file), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	certManager := writeCertManager(t, root, repo)
	var overrides strings.Builder
	fmt.Fprintf(&overrides, "cert-manager:\n  url: file://%s\n  version: %s\n", certManager, testenv.CertManagerVersion)
	overrides.WriteString("images:\n")
	// The Makefile built cert-manager's images from its module as
	// <registry>/cert-manager/<the image name cert-manager gives>.
	fmt.Fprintf(&overrides, "  cert-manager:\n    repository: %s/cert-manager\n", registry)
	for _, provider := range []string{"cluster-api", "bootstrap-kubeadm", "control-plane-kubeadm"} {
		fmt.Fprintf(&overrides, "  %s:\n    repository: %s\n    tag: %s\n", provider, capiImageRepository, os.Getenv("CAPI_VERSION"))
	}
	f, err := os.OpenFile(configPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(overrides.String()); err != nil {
		t.Fatal(err)
	}
	return configPath
}

var stuckReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"CrashLoopBackOff": true, "CreateContainerConfigError": true, "CreateContainerError": true,
}

func deploymentsAvailable(ctx context.Context, k8s client.Client, namespaces []string) error {
	for _, ns := range namespaces {
		list := &appsv1.DeploymentList{}
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return fmt.Errorf("no Deployment in %s", ns)
		}
		for _, d := range list.Items {
			available := false
			for _, c := range d.Status.Conditions {
				available = available || (c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue)
			}
			if !available {
				return fmt.Errorf("%s/%s is not Available: %s", ns, d.Name, podStates(ctx, k8s, ns))
			}
		}
	}
	return nil
}

// stuck names a container of the namespaces' or the simulator's Pods that
// cannot start and will not by waiting: its image cannot be pulled from the
// local registry, it keeps crashing, or its configuration is refused.
func stuck(ctx context.Context, k8s client.Client, namespaces []string) error {
	for _, ns := range append(slices.Clone(namespaces), simNamespace) {
		pods := &corev1.PodList{}
		if err := k8s.List(ctx, pods, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.ContainerStatuses {
				w := c.State.Waiting
				// A crash or two while the webhook certificates arrive is not stuck.
				if w != nil && stuckReasons[w.Reason] && (w.Reason != "CrashLoopBackOff" || c.RestartCount >= 3) {
					return fmt.Errorf("%s/%s: container %s: %s: %s", ns, p.Name, c.Name, w.Reason, w.Message)
				}
			}
		}
	}
	return nil
}

// podStates describes a namespace's Pods' containers, for a failure message.
func podStates(ctx context.Context, k8s client.Client, ns string) string {
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\n  pod %s %s", p.Name, p.Status.Phase)
		for _, c := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " [%s ready=%v restarts=%d %+v]", c.Name, c.Ready, c.RestartCount, c.State)
		}
	}
	return b.String()
}

// checkWebhooks creates objects each webhook must refuse, and one that
// Cluster API's webhooks must admit: every one goes from the API server to
// a Pod through the webhook's Service, over TLS with the certificate
// issued for the Service's names.
func checkWebhooks(ctx context.Context, t *testing.T, k8s client.Client, cfg *rest.Config) {
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipam.cluster.x-k8s.io/v1alpha1", "kind": "MetalVRFIPPool",
		"metadata": map[string]any{"namespace": "default", "name": "bad-gateway"},
		"spec":     map[string]any{"addresses": []any{"10.0.0.0/24"}, "prefix": int64(24), "gateway": "10.0.1.1"},
	}}
	// A Certificate that cert-manager issues again (seen at install, twice
	// within a second) reaches the webhook configuration and the Pod's
	// mounted Secret at different moments; until both hold the same one the
	// API server fails the call instead of the webhook refusing.
	var refused error
	waitFor(ctx, t, 3*time.Minute, "the IPAM webhook answers through its Service", func() error {
		refused = k8s.Create(ctx, pool.DeepCopy())
		if refused == nil {
			t.Fatalf("MetalVRFIPPool %s created, want it refused", pool.GetName())
		}
		if !strings.Contains(refused.Error(), "denied the request") {
			return refused
		}
		return nil
	})
	expectRefused(t, refused, `admission webhook "validation.metalvrfippool.ipam.cluster.x-k8s.io" denied the request`,
		`spec.gateway: Invalid value: "10.0.1.1"`)

	// An IPAddress that takes an address a claim of the pool holds.
	good := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipam.cluster.x-k8s.io/v1alpha1", "kind": "MetalVRFIPPool",
		"metadata": map[string]any{"namespace": "default", "name": "nodes"},
		"spec":     map[string]any{"addresses": []any{"10.50.0.0/24"}, "prefix": int64(24), "gateway": "10.50.0.1"},
	}}
	if err := k8s.Create(ctx, good); err != nil {
		t.Fatal(err)
	}
	addresses := map[string]string{}
	for _, name := range []string{"first", "second"} {
		claim := &ipamv1.IPAddressClaim{}
		claim.Namespace, claim.Name = "default", name
		claim.Spec.PoolRef = ipamv1.IPPoolReference{APIGroup: "ipam.cluster.x-k8s.io", Kind: "MetalVRFIPPool", Name: "nodes"}
		if err := k8s.Create(ctx, claim); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, 3*time.Minute, "claim "+name+" bound", func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
				return err
			}
			if claim.Status.AddressRef.Name == "" {
				return fmt.Errorf("not bound: %+v", claim.Status)
			}
			address := &ipamv1.IPAddress{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: claim.Status.AddressRef.Name}, address); err != nil {
				return err
			}
			addresses[name] = address.Spec.Address
			return nil
		})
	}
	dup := &ipamv1.IPAddress{}
	dup.Namespace, dup.Name = "default", "taken"
	dup.Spec = ipamv1.IPAddressSpec{
		ClaimRef: ipamv1.IPAddressClaimReference{Name: "second"},
		PoolRef:  ipamv1.IPPoolReference{APIGroup: "ipam.cluster.x-k8s.io", Kind: "MetalVRFIPPool", Name: "nodes"},
		Address:  addresses["first"], Prefix: ptrInt32(24), Gateway: "10.50.0.1",
	}
	expectRefused(t, k8s.Create(ctx, dup), `admission webhook "record.ipaddress.metal-vrf.ipam.cluster.x-k8s.io" denied the request`,
		fmt.Sprintf(`spec.address: Invalid value: %q`, addresses["first"]))

	// A user with every ordinary verb on claims and IPAddresses, but not
	// verb assign on the pool, marking an IPAddress as moved (docs/install.md,
	// "Sharing a management cluster"): the overlay's match conditions send
	// it to the webhook.
	checkMarkGuard(ctx, t, k8s, cfg, "second")

	// The PacketCluster's rules are the CRD's (CAPP serves no webhook).
	pc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "PacketCluster",
		"metadata": map[string]any{"namespace": "default", "name": "unnamed-network"},
		"spec": map[string]any{"projectID": "p", "networks": []any{
			map[string]any{"assignment": "cluster-api", "ipAddresses": []any{"10.70.0.0/24"}}}},
	}}
	expectRefused(t, k8s.Create(ctx, pc), "is required with assignment cluster-api")

	// Cluster API's own validation webhook, through its Service, refuses a
	// Cluster with neither a topology nor references.
	cluster := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": clusterv1.GroupVersion.String(), "kind": "Cluster",
		"metadata": map[string]any{"namespace": "default", "name": "webhook-check"},
		"spec":     map[string]any{"clusterNetwork": map[string]any{"pods": map[string]any{"cidrBlocks": []any{"192.168.0.0/16"}}}},
	}}
	expectRefused(t, k8s.Create(ctx, cluster), `admission webhook "validation.cluster.cluster.x-k8s.io" denied the request`)
}

// checkMarkGuard has a user who may edit the claims and IPAddresses of
// namespace default mark the IPAddress of claim as moved by clusterctl.
func checkMarkGuard(ctx context.Context, t *testing.T, k8s client.Client, cfg *rest.Config, claim string) {
	const user = "claims-editor"
	for _, obj := range []client.Object{
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: user},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{ipamv1.GroupVersion.Group}, Resources: []string{"ipaddressclaims", "ipaddresses"}, Verbs: []string{"*"}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		},
	} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: user}
	editor, err := client.New(as, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	target := &ipamv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: claim}}
	mark := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+ipamv1alpha1.MovedAnnotation+`":"x"}}}`))
	var refused error
	waitFor(ctx, t, time.Minute, "RBAC lets "+user+" edit IPAddresses", func() error {
		refused = editor.Patch(ctx, target, mark)
		if refused == nil {
			t.Fatalf("%s marked IPAddress %s as moved, want it refused", user, claim)
		}
		if !strings.Contains(refused.Error(), "denied the request") {
			return refused
		}
		return nil
	})
	expectRefused(t, refused, `admission webhook "mark.ipaddress.metal-vrf.ipam.cluster.x-k8s.io" denied the request`,
		"metadata.annotations["+ipamv1alpha1.MovedAnnotation+"]", `verb "assign"`)
}

func ptrInt32(v int32) *int32 { return &v }

func expectRefused(t *testing.T, err error, messages ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("created, want refused with %q", messages)
		return
	}
	for _, m := range messages {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("refused with %q, want it to say %q", err, m)
		}
	}
}

// checkLeases checks that each provider's leader election Lease names one of
// that namespace's Pods (controller-runtime's identity starts with the
// host name, which is the Pod's name).
func checkLeases(ctx context.Context, t *testing.T, k8s client.Client) {
	for _, ns := range providerNamespaces {
		waitFor(ctx, t, 3*time.Minute, "a Lease held by a Pod in "+ns, func() error {
			leases := &coordinationv1.LeaseList{}
			if err := k8s.List(ctx, leases, client.InNamespace(ns)); err != nil {
				return err
			}
			pods := &corev1.PodList{}
			if err := k8s.List(ctx, pods, client.InNamespace(ns)); err != nil {
				return err
			}
			for _, l := range leases.Items {
				holder := ""
				if l.Spec.HolderIdentity != nil {
					holder = *l.Spec.HolderIdentity
				}
				for _, p := range pods.Items {
					if p.Status.Phase == corev1.PodRunning && strings.HasPrefix(holder, p.Name+"_") {
						return nil
					}
				}
			}
			return fmt.Errorf("%d Leases, none held by a running Pod", len(leases.Items))
		})
	}
}
