package chaos

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	ipammanager "github.com/metal-vrf/cluster-api-metal-vrf/ipam/manager"
)

// ledger watches the Leases of a scenario's namespace: the leader election
// lease, and the allocation records, each naming the process that created
// it. It tells the takeovers apart, and finds the records a deposed leader
// created after it woke up and before it led again: allocations the fence
// should have refused.
type ledger struct {
	ns string

	mu sync.Mutex
	// holder is the lease's holder as last seen.
	holder string
	// deposed maps a leader frozen past its lease to when it woke up,
	// until it holds the lease again.
	deposed map[string]time.Time
	// late are the records created by a deposed leader after it woke.
	late []string
}

// watchLedger starts watching ns until the test ends.
func watchLedger(t *testing.T, ns string) *ledger {
	t.Helper()
	c, err := client.NewWithWatch(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Watch(ctx, &coordinationv1.LeaseList{}, client.InNamespace(ns))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	l := &ledger{ns: ns, deposed: map[string]time.Time{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if lease, ok := ev.Object.(*coordinationv1.Lease); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				l.observe(ev.Type, lease)
			}
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		cancel()
		<-done
	})
	return l
}

// observe notes a change of the leader's lease, or a record created.
func (l *ledger) observe(kind watch.EventType, lease *coordinationv1.Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lease.Name == ipammanager.LeaderElectionID {
		if lease.Spec.HolderIdentity != nil {
			l.holder = *lease.Spec.HolderIdentity
			delete(l.deposed, l.holder)
		}
		return
	}
	by := lease.Annotations[v1alpha1.AllocationRecordedByAnnotation]
	woke, deposed := l.deposed[by]
	// Creation times are in whole seconds; the leader was frozen for
	// several before it woke, so a record of the second it woke in is one
	// it made after waking.
	if kind == watch.Added && deposed && !lease.CreationTimestamp.Time.Before(woke.Truncate(time.Second)) {
		l.late = append(l.late, fmt.Sprintf("record %s (address %s) created by %s at %s, after it woke up at %s without leading again",
			lease.Name, lease.Annotations[v1alpha1.AllocationAddressAnnotation], by, lease.CreationTimestamp.UTC().Format(time.RFC3339), woke.UTC().Format(time.RFC3339Nano)))
	}
}

// leaseHolder reads the leader election lease's holder live.
func (l *ledger) leaseHolder(ctx context.Context) (string, error) {
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: l.ns, Name: ipammanager.LeaderElectionID}, lease); err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *lease.Spec.HolderIdentity, nil
}

// takenOver waits until the lease names a holder other than frozen, and
// says whether it did by the deadline. The caller resumes the frozen leader
// only after it returns, so the last read, after the deadline, still sees
// the lease as it was while the leader was frozen: a loaded machine that
// makes the reads slow (the poll saw none of a takeover 5.2 s into an 8 s
// freeze once) cannot make a takeover go unseen. Without one, the error
// says what the lease said last.
func (l *ledger) takenOver(ctx context.Context, frozen string, deadline time.Time) error {
	var last string
	var err error
	for {
		past := !time.Now().Before(deadline)
		if last, err = l.leaseHolder(ctx); err == nil && last != "" && last != frozen {
			return nil
		}
		if past {
			break
		}
		time.Sleep(retryPeriod)
	}
	if err != nil {
		return fmt.Errorf("reading the lease after the freeze: %w", err)
	}
	return fmt.Errorf("the lease still names %q after the freeze", last)
}

// woke notes that the leader named identity woke up at the given time.
func (l *ledger) woke(identity string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deposed[identity] = at
}

// lateRecords returns the records created by deposed leaders after they woke.
func (l *ledger) lateRecords() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.late...)
}
