package device

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

func TestVLANCache(t *testing.T) {
	now := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	c := NewVLANCache(30 * time.Second)
	c.Now = func() time.Time { return now }
	var reads atomic.Int32
	release := make(chan struct{})
	var failing atomic.Bool
	read := func(context.Context) ([]metalv1.VirtualNetwork, error) {
		reads.Add(1)
		<-release
		if failing.Load() {
			return nil, errors.New("503")
		}
		return []metalv1.VirtualNetwork{{Id: metalv1.PtrString("vn-1")}}, nil
	}
	ctx := t.Context()

	// Machines reconciled at once share one read.
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if list, err := c.get(ctx, "k", read); err != nil || len(list) != 1 {
				t.Errorf("get() = %v, %v", list, err)
			}
		})
	}
	for reads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads for 5 machines at once, want 1", n)
	}
	// Within the TTL, from the cache; another key reads its own.
	_, _ = c.get(ctx, "k", read)
	_, _ = c.get(ctx, "other", read)
	if n := reads.Load(); n != 2 {
		t.Fatalf("%d reads, want 2 (one per key)", n)
	}
	// Past the TTL, read again.
	now = now.Add(31 * time.Second)
	_, _ = c.get(ctx, "k", read)
	if n := reads.Load(); n != 3 {
		t.Fatalf("%d reads after the TTL, want 3", n)
	}
	// A failed read is not kept.
	failing.Store(true)
	now = now.Add(31 * time.Second)
	if _, err := c.get(ctx, "k", read); err == nil {
		t.Fatal("the failure was not returned")
	}
	failing.Store(false)
	if list, err := c.get(ctx, "k", read); err != nil || len(list) != 1 || reads.Load() != 5 {
		t.Fatalf("after a failure: %v, %v, %d reads; want a new read", list, err, reads.Load())
	}
}
