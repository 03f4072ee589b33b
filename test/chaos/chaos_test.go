package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/chaos/invariant"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

const (
	// churn is how long the client creates and deletes claims while the
	// replicas are disturbed.
	churn = time.Minute
	// settleGuard bounds the wait, once churn has stopped, for the
	// namespace to pass the checks: what still fails then is reported. It
	// is a guard against a stuck provider, not a speed target.
	settleGuard = time.Minute
	// frozen is how long the leader stays stopped: past its lease, so that
	// the other replica takes over while it sleeps.
	frozen = leaseDuration + 4*time.Second
)

// TestLeaderKilled kills the leader with SIGKILL every 2 to 5 seconds; it is
// started again at once, as a kubelet restarts a container.
func TestLeaderKilled(t *testing.T) {
	runScenario(t, newNamespace(t), true, func(ctx context.Context, rng *rand.Rand, replicas []*replica) (int, error) {
		kills := 0
		for {
			if !sleep(ctx, 2*time.Second+time.Duration(rng.Int64N(int64(3*time.Second)))) {
				return kills, nil
			}
			r, err := leader(ctx, replicas)
			if err != nil {
				return kills, ignoreDone(ctx, err)
			}
			if err := r.signal(syscall.SIGKILL); err != nil {
				return kills, err
			}
			kills++
		}
	})
}

// TestLeaderFrozen stops the leader with SIGSTOP for longer than its lease,
// then resumes it with SIGCONT: a process paused by its node (memory
// pressure, a live migration, a debugger) that wakes up believing it still
// leads. Every freeze must see the other replica take the lease over while
// the leader sleeps, and the woken leader must record no allocation until
// it leads again.
//
// The API server's allocation fence (config/ipam/fence) is what holds when
// a leader freezes between its own check of its lease and its write: the
// test reports how many of the replicas' records it refused.
func TestLeaderFrozen(t *testing.T) {
	ns := newNamespace(t)
	l := watchLedger(t, ns)
	refusedBefore, err := testenv.FenceRefusals(context.Background(), env.Config)
	if err != nil {
		t.Fatal(err)
	}
	freezes, takeovers := 0, 0
	runScenario(t, ns, true, func(ctx context.Context, rng *rand.Rand, replicas []*replica) (int, error) {
		for {
			if !sleep(ctx, 3*time.Second+time.Duration(rng.Int64N(int64(3*time.Second)))) {
				return freezes, nil
			}
			r, err := leader(ctx, replicas)
			if err != nil {
				return freezes, ignoreDone(ctx, err)
			}
			holder, err := l.leaseHolder(ctx)
			if err != nil {
				return freezes, ignoreDone(ctx, err)
			}
			if err := r.signal(syscall.SIGSTOP); err != nil {
				return freezes, err
			}
			freezes++
			// Resumed even when the churn ends meanwhile: the replicas
			// must settle.
			wake := time.Now().Add(frozen)
			notTaken := l.takenOver(context.Background(), holder, wake)
			tookOver := notTaken == nil
			if tookOver {
				takeovers++
			} else {
				t.Logf("freeze %d of %s: no takeover seen: %v", freezes, holder, notTaken)
			}
			time.Sleep(time.Until(wake))
			if tookOver {
				l.woke(holder, time.Now())
			}
			if err := r.signal(syscall.SIGCONT); err != nil {
				return freezes, err
			}
		}
	})
	late := l.lateRecords()
	refused, err := testenv.FenceRefusals(context.Background(), env.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d freezes, %d takeovers seen while the leader was frozen, %d allocations recorded by a deposed leader after it woke, %.0f records refused by the API server's fence",
		freezes, takeovers, len(late), refused-refusedBefore)
	if takeovers != freezes {
		t.Errorf("only %d of %d freezes saw the lease taken over while the leader was frozen", takeovers, freezes)
	}
	for _, record := range late {
		t.Error(record)
	}
}

// TestWithoutLeaderElection runs two replicas without --leader-elect (its
// default): nothing disturbs them, they only run side by side.
func TestWithoutLeaderElection(t *testing.T) {
	runScenario(t, newNamespace(t), false, nil)
}

// disturb does its harm to the replicas until ctx is done and returns how
// many times it did.
type disturb func(ctx context.Context, rng *rand.Rand, replicas []*replica) (int, error)

// newNamespace creates the namespace of a scenario.
func newNamespace(t *testing.T) string {
	t.Helper()
	requireEnv(t)
	ns, err := env.NewNamespace(context.Background(), "chaos")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// runScenario starts two replicas in ns (with leader election when
// leaderElect), churns claims for churn while disturb runs, waits for the
// replicas to settle, and checks the invariants.
func runScenario(t *testing.T, ns string, leaderElect bool, disturb disturb) {
	ctx := context.Background()
	checked, targets := createPools(ctx, t, ns)

	logs := replicaLogs(t)
	var replicas []*replica
	for _, name := range []string{"replica-a", "replica-b"} {
		r, err := startReplica(name, ns, leaderElect, logs)
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, r)
		defer r.stop()
	}

	// The seed is logged so that a failing run's churn can be told apart;
	// map order and timing make no two runs alike anyway.
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	w := newWorkload(env.Client, ns, seed, targets...)
	churnCtx, stopChurn := context.WithTimeout(ctx, churn)
	defer stopChurn()
	disturbed := make(chan error, 1)
	events := 0
	go func() {
		var err error
		if disturb != nil {
			events, err = disturb(churnCtx, rng, replicas)
		}
		disturbed <- err
	}()
	start := time.Now()
	if err := w.run(churnCtx); err != nil {
		t.Errorf("churn: %v", err)
	}
	if err := <-disturbed; err != nil {
		t.Errorf("disturbing the replicas: %v", err)
	}
	churned := time.Since(start)
	if disturb != nil && events == 0 {
		t.Error("the replicas were never disturbed: no leader was found in time")
	}

	violations, settled, err := settle(ctx, ns, checked)
	if err != nil {
		t.Fatal(err)
	}
	restarts := 0
	for _, r := range replicas {
		restarts += r.restarts()
	}
	duplicates := 0
	for _, v := range violations {
		if v.Kind == invariant.Duplicate {
			duplicates++
		}
	}
	t.Logf("seed %d; %d claims created, %d deleted, %d recreated under their name; %d disturbances, %d restarts; churn %s, settled %s later; %d addresses held twice or more, %d violations",
		seed, w.created, w.deleted, w.recreated, events, restarts, churned.Round(time.Second), settled.Round(time.Second), duplicates, len(violations))
	for _, v := range violations {
		t.Error(v)
	}
}

// createPools creates the scenario's pools in ns and returns what the checks
// know of them and how claims are spread over them: a small pool, so that
// claims wait and every release is contended; a wider one with excluded
// addresses; a cluster-scoped one. All three have a gateway.
func createPools(ctx context.Context, t *testing.T, ns string) ([]invariant.Pool, []target) {
	t.Helper()
	type fixture struct {
		pool     client.Object
		subnet   string
		gateway  string
		excluded []string
		weight   float64
	}
	global := &v1alpha1.GlobalMetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Name: ns + "-global"}}
	fixtures := []fixture{
		{&v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "small"}},
			"10.1.0.0/28", "10.1.0.1", []string{"10.1.0.5", "10.1.0.9"}, 0.4},
		{&v1alpha1.MetalVRFIPPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wide"}},
			"10.2.0.0/24", "10.2.0.254", []string{"10.2.0.1", "10.2.0.2", "10.2.0.3"}, 0.4},
		{global, "10.3.0.0/25", "10.3.0.1", nil, 0.2},
	}
	var checked []invariant.Pool
	var targets []target
	for _, f := range fixtures {
		subnet := netip.MustParsePrefix(f.subnet)
		spec := v1alpha1.MetalVRFIPPoolSpec{
			Addresses: []string{f.subnet}, Prefix: ptr.To(int32(subnet.Bits())),
			Gateway: f.gateway, ExcludedAddresses: f.excluded,
		}
		var kind string
		switch p := f.pool.(type) {
		case *v1alpha1.MetalVRFIPPool:
			p.Spec, kind = spec, v1alpha1.MetalVRFIPPoolKind
		case *v1alpha1.GlobalMetalVRFIPPool:
			p.Spec, kind = spec, v1alpha1.GlobalMetalVRFIPPoolKind
		}
		if err := env.Client.Create(ctx, f.pool); err != nil {
			t.Fatal(err)
		}
		var excluded []netip.Addr
		for _, a := range f.excluded {
			excluded = append(excluded, netip.MustParseAddr(a))
		}
		checked = append(checked, invariant.SubnetPool(kind, f.pool.GetName(), subnet, netip.MustParseAddr(f.gateway), excluded...))
		targets = append(targets, target{ref: poolRef(kind, f.pool.GetName()), weight: f.weight})
	}
	return checked, targets
}

// settle waits, once the churn has stopped, until the namespace passes every
// check, or settleGuard has passed, and returns what the checks find then
// and how long it took.
func settle(ctx context.Context, ns string, pools []invariant.Pool) ([]invariant.Violation, time.Duration, error) {
	start := time.Now()
	for {
		claims := &ipamv1.IPAddressClaimList{}
		addresses := &ipamv1.IPAddressList{}
		if err := errors.Join(env.Client.List(ctx, claims, client.InNamespace(ns)),
			env.Client.List(ctx, addresses, client.InNamespace(ns))); err != nil {
			return nil, 0, err
		}
		violations := invariant.Check(pools, claims.Items, addresses.Items)
		if len(violations) == 0 || time.Since(start) >= settleGuard {
			return violations, time.Since(start), nil
		}
		time.Sleep(time.Second)
	}
}

// replicaLogs is the file both replicas of a scenario write to; it is kept
// and named when the test fails.
func replicaLogs(t *testing.T) *os.File {
	t.Helper()
	dir, err := os.MkdirTemp("", "chaos-"+t.Name()+"-")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "replicas.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Close()
		if t.Failed() {
			t.Logf("the replicas' logs: %s", f.Name())
			return
		}
		_ = os.RemoveAll(dir)
	})
	return f
}

// sleep waits for d or until ctx is done, telling whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// ignoreDone drops err once ctx is done: waiting for a leader is cut short
// by the churn's end.
func ignoreDone(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
