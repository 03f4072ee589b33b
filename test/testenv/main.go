package testenv

import (
	"context"
	"os"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// RunMain is a suite's TestMain: it starts what the suite needs with start,
// records start's error in setupErr for the tests to report, runs the
// tests, then stops what start started, the last first, and exits.
func RunMain(m *testing.M, start func(context.Context) ([]func(), error), setupErr *error) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	ctx, cancel := context.WithCancel(context.Background())
	stops, err := start(ctx)
	*setupErr = err
	code := m.Run()
	cancel()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	os.Exit(code)
}
