package manager

import (
	"context"
	"errors"
	"flag"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/managerutil"
)

// fakeLock accepts or refuses writes of the lease.
type fakeLock struct {
	resourcelock.Interface
	refuse error
}

func (l *fakeLock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return l.refuse }
func (l *fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return l.refuse }
func (l *fakeLock) Identity() string                                                { return "me" }

func TestFence(t *testing.T) {
	now := time.Unix(1000, 0)
	f := &fence{duration: defaultLeaseDuration, now: func() time.Time { return now }}
	inner := &fakeLock{}
	lock := &fencedLock{Interface: inner, fence: f}
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "me"}
	ctx := context.Background()

	steps := []struct {
		name   string
		do     func()
		fenced bool
	}{
		{"before the lease is acquired", func() {}, true},
		{"after acquiring it", func() { _ = lock.Create(ctx, mine) }, false},
		{"within the lease duration", func() { now = now.Add(defaultLeaseDuration) }, false},
		{"past the lease duration (frozen)", func() { now = now.Add(time.Millisecond) }, true},
		{"after a failed renewal", func() { inner.refuse = errors.New("conflict"); _ = lock.Update(ctx, mine) }, true},
		{"after a renewal", func() { inner.refuse = nil; _ = lock.Update(ctx, mine) }, false},
		{"after a release, which renews nothing", func() {
			now = now.Add(defaultLeaseDuration + time.Second)
			_ = lock.Update(ctx, resourcelock.LeaderElectionRecord{})
		}, true},
	}
	for _, step := range steps {
		step.do()
		err := f.check()
		if got := errors.Is(err, registry.ErrFenced); got != step.fenced {
			t.Fatalf("%s: check() = %v, want fenced %v", step.name, err, step.fenced)
		}
	}
}

// The lease flags drive both the elector and the fence: a fence kept on
// the default lease while the flags shorten it would let a frozen leader
// allocate after a standby took over (test/chaos TestLeaderFrozen shows it
// end to end).
func TestLeaseFlagsDriveTheFence(t *testing.T) {
	var o managerutil.Options
	fs := flag.NewFlagSet("ipam-manager", flag.ContinueOnError)
	o.AddFlags(fs, "pools")
	if err := fs.Parse([]string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s"}); err != nil {
		t.Fatal(err)
	}
	lease, renew := leaseTimings(o)
	if lease != 4*time.Second || renew != 3*time.Second {
		t.Fatalf("timings %s, %s; want the flags' 4s, 3s", lease, renew)
	}
	lock, f, err := newFencedLock(&rest.Config{Host: "https://127.0.0.1:1"}, "ns", "lease", "me", lease, renew)
	if err != nil {
		t.Fatal(err)
	}
	if f.duration != 4*time.Second {
		t.Fatalf("the fence allows %s after a renewal; want the flag's 4s", f.duration)
	}
	// The API server's fence takes the Lease as its parameter by this label.
	if labels := lock.Interface.(*resourcelock.LeaseLock).Labels; labels[v1alpha1.LeaderElectionLabel] != "true" {
		t.Fatalf("the Lease is written with labels %v; want %s", labels, v1alpha1.LeaderElectionLabel)
	}
	if lease, renew := leaseTimings(managerutil.Options{}); lease != defaultLeaseDuration || renew != defaultRenewDeadline {
		t.Fatalf("without flags: %s, %s; want the defaults", lease, renew)
	}
}
