package manager

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/managerutil"
)

// Leader election timings when the flags set none: controller-runtime's
// defaults.
const (
	defaultLeaseDuration = 15 * time.Second
	defaultRenewDeadline = 10 * time.Second
)

// leaseTimings are the lease duration and renew deadline of the flags, or
// the defaults: the elector and the fence must use the same lease duration,
// or a standby takes over while the fence still lets the old leader allocate.
func leaseTimings(o managerutil.Options) (lease, renew time.Duration) {
	lease, renew = o.LeaseDuration, o.RenewDeadline
	if lease == 0 {
		lease = defaultLeaseDuration
	}
	if renew == 0 {
		renew = defaultRenewDeadline
	}
	return lease, renew
}

// fence keeps a leader that lost its lease without knowing it from
// allocating. A leader frozen (SIGSTOP, a stalled VM) past its lease wakes
// up still believing it leads until its elector notices, while another
// replica leads already; the allocation records in the API server keep the
// two from handing out one address twice, and the fence keeps the stale one
// from trying at all. It trusts only the last successful write of the
// lease by this process: the other candidates wait a whole lease duration
// from when they saw that write before taking over, which is no earlier
// than when it started.
type fence struct {
	duration time.Duration
	now      func() time.Time

	mu      sync.Mutex
	renewed time.Time // start of the last successful write of the lease
}

// check refuses allocation when the last renewal is older than the lease.
func (f *fence) check() error {
	f.mu.Lock()
	renewed := f.renewed
	f.mu.Unlock()
	if renewed.IsZero() {
		return fmt.Errorf("%w: this replica has not acquired the leader election lease", registry.ErrFenced)
	}
	if age := f.now().Sub(renewed); age > f.duration {
		return fmt.Errorf("%w: this replica last renewed its leader election lease %s ago, longer than the lease lasts (%s)",
			registry.ErrFenced, age.Round(time.Millisecond), f.duration)
	}
	return nil
}

// fencedLock is a resource lock that tells the fence of every successful
// write of the lease that makes this process its holder.
type fencedLock struct {
	resourcelock.Interface
	fence *fence
}

func (l *fencedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ler, func() error { return l.Interface.Create(ctx, ler) })
}

func (l *fencedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ler, func() error { return l.Interface.Update(ctx, ler) })
}

func (l *fencedLock) write(ler resourcelock.LeaderElectionRecord, do func() error) error {
	start := l.fence.now()
	if err := do(); err != nil {
		return err
	}
	// A release on shutdown writes an empty holder: no renewal.
	if ler.HolderIdentity == l.Identity() {
		l.fence.mu.Lock()
		l.fence.renewed = start
		l.fence.mu.Unlock()
	}
	return nil
}

// namespaceFile is where a pod finds its namespace.
const namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// inClusterNamespace is the namespace of the pod the manager runs in.
func inClusterNamespace() (string, error) {
	data, err := os.ReadFile(namespaceFile)
	if err != nil {
		return "", fmt.Errorf("not running in a cluster: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// processIdentity names this process: its host and a random part, so that
// a restarted process is told from the one before.
func processIdentity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", err
	}
	return host + "_" + string(uuid.NewUUID()), nil
}

// newFencedLock builds the Lease lock controller-runtime would for the
// process named identity, wrapped to feed a fence of the lease duration
// lease, and returns both. Every write of the Lease labels it as the
// API server's fence reads it (config/ipam/fence).
func newFencedLock(cfg *rest.Config, namespace, name, identity string, lease, renew time.Duration) (*fencedLock, *fence, error) {
	if namespace == "" {
		var err error
		if namespace, err = inClusterNamespace(); err != nil {
			return nil, nil, fmt.Errorf("no leader election namespace given: %w", err)
		}
	}
	lock, err := resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, namespace, name,
		resourcelock.ResourceLockConfig{Identity: identity}, cfg, renew)
	if err != nil {
		return nil, nil, err
	}
	leaseLock, ok := lock.(*resourcelock.LeaseLock)
	if !ok {
		return nil, nil, fmt.Errorf("leader election lock %T is not a Lease lock", lock)
	}
	leaseLock.Labels = map[string]string{v1alpha1.LeaderElectionLabel: "true"}
	f := &fence{duration: lease, now: time.Now}
	return &fencedLock{Interface: lock, fence: f}, f, nil
}
