package manager

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/internal/registry"
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
	f := &fence{duration: leaseDuration, now: func() time.Time { return now }}
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
		{"within the lease duration", func() { now = now.Add(leaseDuration) }, false},
		{"past the lease duration (frozen)", func() { now = now.Add(time.Millisecond) }, true},
		{"after a failed renewal", func() { inner.refuse = errors.New("conflict"); _ = lock.Update(ctx, mine) }, true},
		{"after a renewal", func() { inner.refuse = nil; _ = lock.Update(ctx, mine) }, false},
		{"after a release, which renews nothing", func() {
			now = now.Add(leaseDuration + time.Second)
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
