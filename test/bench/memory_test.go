package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// memoryPoints are the fills BenchmarkManagerMemory measures: addresses in
// use, perPool in each of pools pools, so that a line through both reaches
// 1,000,000 in use in 10,000 pools (memoryTarget) at the same addresses per
// pool.
var memoryPoints = []struct{ pools, perPool int }{{100, 100}, {500, 100}}

const (
	memoryTargetInUse = 1_000_000
	memoryTargetPools = 10_000
)

// BenchmarkManagerMemory measures our manager's memory as an operator sees
// it: the real ipam-manager binary, in a process of its own, serving pools
// whose addresses are in use (bound claims and their IPAddresses, created
// before it starts, as after a restart). Once every pool counts its
// addresses and the environment is idle, it reads the process's resident
// memory (rss-MB, VmRSS) and the Go heap in use (heap-inuse-MB, from its
// metrics), per 1,000 addresses in use (rss-MB/1000), for each point of
// memoryPoints, then the resident memory a line through the two points
// gives at 1,000,000 addresses in 10,000 pools (extrapolated-rss-MB).
func BenchmarkManagerMemory(b *testing.B) {
	setup(b)
	ctx, cancel := context.WithTimeout(b.Context(), scenarioTimeout)
	defer cancel()
	b.StopTimer()
	defer b.StartTimer()
	binary := filepath.Join(logDir, "ipam-manager")
	if _, err := testenv.RunTool(".", nil, "go", "build", "-o", binary, "../../ipam"); err != nil {
		b.Fatal(err)
	}
	rss := make([]float64, len(memoryPoints))
	for i, point := range memoryPoints {
		inUse := point.pools * point.perPool
		b.Run(fmt.Sprintf("in-use=%d/pools=%d", inUse, point.pools), func(b *testing.B) {
			for range b.N {
				m, err := measureMemory(ctx, binary, point.pools, point.perPool)
				if err != nil {
					b.Fatalf("%v (manager logs are in %s)", err, logDir)
				}
				if m.busy != nil {
					b.Logf("read while busy: %v", m.busy)
				}
				rss[i] = m.rss
				b.ReportMetric(m.rss, "rss-MB")
				b.ReportMetric(m.heapInUse, "heap-inuse-MB")
				b.ReportMetric(m.rss/float64(inUse)*1000, "rss-MB/1000")
				if i > 0 && rss[0] > 0 {
					reportExtrapolation(b, rss[0], m.rss)
				}
			}
		})
	}
}

// reportExtrapolation reports, on the last point, the line through the
// first point's and the last point's resident memory: its slope per 1,000
// addresses in use and where it reaches at memoryTargetInUse addresses in
// memoryTargetPools pools (the same addresses per pool as the points).
func reportExtrapolation(b *testing.B, first, last float64) {
	p0, p1 := memoryPoints[0], memoryPoints[len(memoryPoints)-1]
	n0, n1 := float64(p0.pools*p0.perPool), float64(p1.pools*p1.perPool)
	if memoryTargetPools*p1.perPool != memoryTargetInUse {
		b.Fatalf("the points hold %d addresses per pool, the target %d", p1.perPool, memoryTargetInUse/memoryTargetPools)
	}
	slope := (last - first) / (n1 - n0)
	b.ReportMetric(slope*1000, "slope-MB/1000")
	b.ReportMetric(first+slope*(memoryTargetInUse-n0), "extrapolated-rss-MB")
}

// measureMemory fills a fresh environment with pools pools of perPool
// addresses in use each, runs the manager binary on it until every pool
// counts them, and reads the manager's memory.
func measureMemory(ctx context.Context, binary string, pools, perPool int) (processMemory, error) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		return processMemory{}, err
	}
	defer func() { _ = env.Stop() }()
	k8s := env.Client
	const ns = "memory"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return processMemory{}, err
	}
	// Each pool is a /24 of its own, paused until its addresses exist.
	poolObjects := make([]*v1alpha1.MetalVRFIPPool, pools)
	for p := range pools {
		subnet := netip.AddrFrom4([4]byte{10, byte(p / 256), byte(p % 256), 0})
		poolObjects[p] = &v1alpha1.MetalVRFIPPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pool-%05d", p), Annotations: map[string]string{clusterv1.PausedAnnotation: "true"}},
			Spec: v1alpha1.MetalVRFIPPoolSpec{
				Addresses: []string{netip.PrefixFrom(subnet, 24).String()}, Prefix: ptr.To[int32](24), Gateway: subnet.Next().String(),
			},
		}
		if err := k8s.Create(ctx, poolObjects[p]); err != nil {
			return processMemory{}, err
		}
	}
	err = forEach(ctx, pools*perPool, creators, func(i int) error {
		pool := poolObjects[i/perPool]
		ip := netip.MustParsePrefix(pool.Spec.Addresses[0]).Addr().Next().Next()
		for range i % perPool {
			ip = ip.Next()
		}
		name := fmt.Sprintf("held-%07d", i)
		address := &ipamv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ipamv1.IPAddressSpec{
				ClaimRef: ipamv1.IPAddressClaimReference{Name: name},
				PoolRef:  ipamv1.IPPoolReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: v1alpha1.MetalVRFIPPoolKind, Name: pool.Name},
				Address:  ip.String(), Prefix: ptr.To[int32](24), Gateway: pool.Spec.Gateway,
			},
		}
		if err := createHolder(ctx, k8s, pool, address); err != nil {
			return err
		}
		return k8s.Create(ctx, address)
	})
	if err != nil {
		return processMemory{}, fmt.Errorf("creating the addresses in use: %w", err)
	}

	manager, err := startManagerProcess(env, binary)
	if err != nil {
		return processMemory{}, err
	}
	defer manager.stop()
	for _, pool := range poolObjects {
		resume := client.MergeFrom(pool.DeepCopy())
		pool.Annotations = nil
		if err := k8s.Patch(ctx, pool, resume); err != nil {
			return processMemory{}, err
		}
	}
	if err := awaitCounted(ctx, k8s, ns, pools, perPool); err != nil {
		return processMemory{}, err
	}
	// On a machine busy with other work the environment may not go idle
	// in settle's time: the memory is read all the same, and said to be
	// read busy (it is then an upper bound of the idle figure).
	idleErr := settle(ctx)
	m, err := manager.memory(ctx)
	m.busy = idleErr
	return m, err
}

// awaitCounted waits until each of the namespace's pools counts perPool
// addresses in use.
func awaitCounted(ctx context.Context, k8s client.Client, ns string, pools, perPool int) error {
	for {
		var list v1alpha1.MetalVRFIPPoolList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		counted := 0
		for _, pool := range list.Items {
			if s := pool.Status.IPAddresses; s != nil && s.Used == int64(perPool) {
				counted++
			}
		}
		if counted == pools {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d pools count their %d addresses in use: %w", counted, pools, perPool, ctx.Err())
		case <-time.After(5 * time.Second):
		}
	}
}

// processMemory is a process's resident memory (VmRSS) and its Go heap in
// use, in MiB.
type processMemory struct {
	rss, heapInUse float64
	// busy is why the environment was not idle when they were read.
	busy error
}

// managerProcess is the ipam-manager binary running against an environment.
type managerProcess struct {
	cmd         *exec.Cmd
	metricsPort int
	dir         string
}

func startManagerProcess(env *testenv.Environment, binary string) (*managerProcess, error) {
	dir, err := os.MkdirTemp("", "memory-")
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	metrics, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	logs, err := logFile("memory-" + filepath.Base(dir) + ".log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, "--kubeconfig="+kubeconfig, "--webhook-port=0", "--allocation-namespace="+testenv.AllocationNamespace,
		"--health-probe-bind-address=0", fmt.Sprintf("--diagnostics-address=127.0.0.1:%d", metrics), "--insecure-diagnostics")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &managerProcess{cmd: cmd, metricsPort: metrics, dir: dir}, nil
}

func (m *managerProcess) stop() {
	_ = m.cmd.Process.Signal(os.Interrupt)
	_ = m.cmd.Wait()
	_ = os.RemoveAll(m.dir)
}

// memory reads the process's resident memory from /proc and the heap in
// use from its metrics, in MiB.
func (m *managerProcess) memory(ctx context.Context) (processMemory, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		return processMemory{}, err
	}
	var out processMemory
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return processMemory{}, err
			}
			out.rss = kb / 1024
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", m.metricsPort), nil)
	if err != nil {
		return processMemory{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return processMemory{}, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return processMemory{}, err
	}
	for _, sample := range families["go_memstats_heap_inuse_bytes"].GetMetric() {
		out.heapInUse = sample.GetGauge().GetValue() / (1 << 20)
	}
	return out, nil
}
