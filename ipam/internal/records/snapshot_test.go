package records

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/metal-vrf/cluster-api-metal-vrf/ipam/api/v1alpha1"
)

// slowReader is a reader each list of which takes listTime on the store's
// clock.
type slowReader struct {
	client.Reader
	clock    *fakeClock
	listTime time.Duration

	mu    sync.Mutex
	lists int
}

func (r *slowReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.mu.Lock()
	r.lists++
	r.mu.Unlock()
	r.clock.advance(r.listTime)
	return r.Reader.List(ctx, list, opts...)
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A read of the cluster that takes longer than snapshotTTL (a large
// cluster on a busy API server) is shared by the seeds that come right
// after it, as a quick one is: otherwise each of them reads the whole
// cluster again, and seeding costs pools × objects.
func TestASlowReadIsSharedToo(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, ipamv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	clock := &fakeClock{now: time.Unix(0, 0)}
	reader := &slowReader{Reader: c, clock: clock, listTime: snapshotTTL}
	s := New(c, reader, "default", Writer{Identity: "test"})
	s.now = clock.Now

	ctx := context.Background()
	if _, err := s.current(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	first := reader.lists
	if first == 0 {
		t.Fatal("the first seed read nothing")
	}
	if _, err := s.current(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if reader.lists != first {
		t.Fatalf("a seed right after a read that took %v read the cluster again (%d lists, then %d)", time.Duration(first)*snapshotTTL, first, reader.lists)
	}
	clock.advance(snapshotTTL)
	if _, err := s.current(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if reader.lists == first {
		t.Fatalf("a seed %v after the read used it still", snapshotTTL)
	}
}
