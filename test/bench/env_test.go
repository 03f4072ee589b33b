// Package bench measures how fast IPAddressClaims get bound on a real
// kube-apiserver and etcd (envtest), for this provider's MetalVRFIPPool and,
// in the same run and on the same API server, for the reference in-cluster
// provider's InClusterIPPool served by its real manager binary, built from
// its pinned module.
//
// What is measured, end to end as a consumer of the IPAM contract sees it:
// from just before the client sends the claim's create request to the moment
// a watch on the claims shows its status.addressRef set. That includes the
// API server, etcd, the informers of the manager and the few writes that
// ipamutil.ClaimReconciler makes per claim, not only the allocation.
//
//   - BenchmarkBindClaims: 1,000 claims created at once on an empty /16
//     pool; reports claims/s (1,000 / (last bound - first created)), p50/p99
//     claim-to-bound latency and, for ours, claims/s as a multiple of the
//     in-cluster provider's (x-in-cluster).
//   - BenchmarkClaimLatencyAtScale: 100 claims created one at a time (each
//     waits until the previous is bound) on a pool with 0 or 10,000 addresses
//     in use; reports p50/p99 and, at 10,000, the p50 as a multiple of the
//     empty pool's (x-empty-p50). The in-cluster provider lists every
//     IPAddress of the pool and rebuilds its free set for each claim, so its
//     latency grows with the addresses in use; ours should not.
//
// With -count > 1 each sub-benchmark repeats before the next one starts, so
// x-in-cluster and x-empty-p50 compare with the reference's last run.
//
// Every run also checks correctness: each claim bound to an IPAddress of its
// own, no address handed out twice (also against the addresses already in
// use), every address inside the pool and never the gateway.
//
// The figures are recorded in docs/benchmarks.md; nothing here fails because
// the machine is slow.
package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// concurrency is the number of claim workers our manager runs. The in-cluster
// provider always runs one: its allocation is safe only with one.
const concurrency = 10

// The environment is shared by every benchmark of the process and started by
// the first one that runs, so `go test` without -bench starts nothing.
var (
	setupOnce sync.Once
	setupErr  error
	// k8s is the environment's uncached client, without client-side rate
	// limiting: claims are created as fast as the API server takes them.
	k8s client.Client
	// cfg and scheme are for the claim watches.
	cfg    *rest.Config
	scheme *runtime.Scheme
	// stops undoes the setup, in reverse order.
	stops []func()
	// logDir holds both managers' logs; kept when a benchmark failed.
	logDir string
)

// setup starts the API server with CAPI's, our and the in-cluster provider's
// CRDs (no webhooks), our manager in-process and the in-cluster manager as a
// peer process.
func setup(b *testing.B) {
	b.Helper()
	setupOnce.Do(func() { setupErr = start() })
	if setupErr != nil {
		b.Fatal(setupErr)
	}
}

func start() error {
	var err error
	if logDir, err = os.MkdirTemp("", "claims-bench-"); err != nil {
		return err
	}
	ourLog, err := logFile("metal-vrf.log")
	if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(ourLog), func(o *zap.Options) { o.TimeEncoder = zapcore.RFC3339NanoTimeEncoder }))

	env, err := testenv.Start(testenv.Options{InClusterCRDs: true})
	if err != nil {
		return err
	}
	stops = append(stops, func() { _ = env.Stop() })

	if scheme, err = testenv.Scheme(); err != nil {
		return err
	}
	k8s, cfg = env.Client, env.Config

	stopIPAM, err := env.StartIPAM(context.Background(), env.IPAMOptions(concurrency))
	if err != nil {
		return fmt.Errorf("starting our manager: %w", err)
	}
	stops = append(stops, stopIPAM)

	theirLog, err := logFile("in-cluster.log")
	if err != nil {
		return err
	}
	stopInCluster, err := env.StartInCluster(theirLog)
	if err != nil {
		return fmt.Errorf("starting the in-cluster manager: %w", err)
	}
	stops = append(stops, stopInCluster)
	return nil
}

// logFile creates a log file in logDir that is closed at the end.
func logFile(name string) (*os.File, error) {
	f, err := os.Create(filepath.Join(logDir, name))
	if err != nil {
		return nil, err
	}
	stops = append(stops, func() { _ = f.Close() })
	return f, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	if logDir != "" {
		if code == 0 {
			_ = os.RemoveAll(logDir)
		} else {
			fmt.Fprintf(os.Stderr, "manager logs kept in %s\n", logDir)
		}
	}
	os.Exit(code)
}
