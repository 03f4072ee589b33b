// Package bench measures how fast IPAddressClaims get bound on a real
// kube-apiserver and etcd (envtest), for this provider's MetalVRFIPPool and,
// in the same run, for the reference in-cluster provider's InClusterIPPool
// served by its real manager binary, built from its pinned module.
//
// Every measurement starts from a fresh API server and etcd, with only the
// measured provider's manager running, so neither
// provider pays for the other's watches or for objects an earlier
// measurement left behind.
//
// What is measured, end to end as a consumer of the IPAM contract sees it:
// from just before the client sends the claim's create request to the moment
// a watch on the claims shows its status.addressRef set. That includes the
// API server, etcd, the informers of the manager and the few writes that
// the provider's claim reconciler makes per claim, not only the allocation.
//
//   - BenchmarkBindClaims: 1,000 claims created at once on an empty /16
//     pool, for each provider in turn; reports each provider's claims/s (1,000 / (last bound - first created)), p50/p99
//     claim-to-bound latency and cpu-ms/claim (the CPU time of the API
//     server, etcd, the manager and the client while binding, per claim:
//     what a claim costs, which moves less than claims/s when the machine
//     is busy with other work, though it too grows on a machine loaded
//     far beyond its cores), writes/claim (the write requests the API
//     server served, from every client, per claim), and ours as a multiple
//     of the in-cluster provider's claims/s (x-in-cluster). With -count=N
//     the two providers alternate N times, so a slow spell of the machine
//     hits both.
//   - BenchmarkClaimWrites: the CPU time of each kind of write a claim
//     costs (its creation, release finalizer, allocation record, IPAddress
//     and status), 1,000 of a kind at a time on an API server with no
//     manager, and of a block ledger's update for comparison: what the
//     throughput can come down to when writes are all that is left.
//   - BenchmarkClaimLatencyAtScale: 100 claims created one at a time (each
//     waits until the previous is bound) on a pool with 0 or 10,000 addresses
//     in use; reports p50/p99 and, at 10,000, the p50 as a multiple of the
//     empty pool's (x-empty-p50). The in-cluster provider lists every
//     IPAddress of the pool and rebuilds its free set for each claim, so its
//     latency grows with the addresses in use; ours should not.
//
// Every run also checks correctness: each claim bound to an IPAddress of its
// own, no address handed out twice (also against the addresses already in
// use), every address inside the pool and never the gateway.
//
// capp_test.go measures the CAPP manager the same way, against the Metal API
// simulator: the Metal API calls a PacketMachine costs, and how long a burst
// of machines takes to provision under the platform's creation limit.
//
// The figures are recorded in docs/benchmarks.md; nothing here fails because
// the machine is slow.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
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

var (
	setupOnce sync.Once
	setupErr  error
	// scheme is for the benchmark's clients and claim watches.
	scheme *runtime.Scheme
	// stops undoes the setup, in reverse order.
	stops []func()
	// logDir holds both managers' logs; kept when a benchmark failed.
	logDir string
	// ourLog and theirLog are the managers' logs.
	ourLog, theirLog io.Writer
)

// setup prepares what every measurement shares: the scheme and the log files.
// It runs once per process, so `go test` without -bench starts nothing.
func setup(b *testing.B) {
	b.Helper()
	setupOnce.Do(func() { setupErr = prepare() })
	if setupErr != nil {
		b.Fatal(setupErr)
	}
}

func prepare() error {
	var err error
	if logDir, err = os.MkdirTemp("", "claims-bench-"); err != nil {
		return err
	}
	if ourLog, err = logFile("metal-vrf.log"); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(ourLog), func(o *zap.Options) { o.TimeEncoder = zapcore.RFC3339NanoTimeEncoder }))
	if theirLog, err = logFile("in-cluster.log"); err != nil {
		return err
	}
	scheme, err = testenv.Scheme()
	return err
}

// environment is one API server and etcd with CAPI's, our and the in-cluster
// provider's CRDs (no webhooks) and one provider's manager: ours in-process,
// or the in-cluster provider's as a peer process.
type environment struct {
	// k8s is the environment's uncached client, without client-side rate
	// limiting: claims are created as fast as the API server takes them.
	k8s client.Client
	// cfg is for the claim watches.
	cfg  *rest.Config
	stop func()
}

// startAlone starts a fresh environment running only p's manager.
func startAlone(p provider) (*environment, error) {
	env, err := testenv.Start(testenv.Options{InClusterCRDs: true})
	if err != nil {
		return nil, err
	}
	stopManager, err := p.start(env)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("starting the %s manager: %w", p.name, err), env.Stop())
	}
	return &environment{k8s: env.Client, cfg: env.Config, stop: func() {
		stopManager()
		_ = env.Stop()
	}}, nil
}

// startOurs runs our manager in-process with concurrency claim workers.
func startOurs(env *testenv.Environment) (func(), error) {
	return env.StartIPAM(context.Background(), env.IPAMOptions(concurrency))
}

// startInCluster runs the in-cluster provider's manager as a peer process.
func startInCluster(env *testenv.Environment) (func(), error) {
	return env.StartInCluster(theirLog)
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
