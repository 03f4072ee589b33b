package managerutil

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCollectUntilDone registers a collector for as long as its manager
// runs, and leaves a second one of the same series out without failing.
func TestCollectUntilDone(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	first := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_gauge", Help: "A gauge."})
	second := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_gauge", Help: "A gauge."})
	series := func() int {
		t.Helper()
		n, err := testutil.GatherAndCount(reg, "test_gauge")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- collectUntilDone(ctx, reg, first) }()
	for series() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	otherCtx, stopOther := context.WithCancel(context.Background())
	go func() { done <- collectUntilDone(otherCtx, reg, second) }()
	stopOther()
	if err := <-done; err != nil {
		t.Errorf("a collector of series already reported: %v, want it left out", err)
	}
	if n := series(); n != 1 {
		t.Errorf("%d series of test_gauge, want 1", n)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("collectUntilDone: %v", err)
	}
	if n := series(); n != 0 {
		t.Errorf("%d series of test_gauge after the manager stopped, want 0", n)
	}
}
