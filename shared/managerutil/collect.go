package managerutil

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// CollectWhileLeading adds c to reg while mgr leads (all along without
// leader election) and takes it out when mgr stops. The series c reports at
// scrape time describe what the leader does, so a standby replica reports
// none rather than a second, stale copy.
func CollectWhileLeading(mgr ctrl.Manager, reg prometheus.Registerer, c prometheus.Collector) error {
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return collectUntilDone(ctx, reg, c)
	}))
}

// collectUntilDone registers c with reg until ctx is done. A collector of the
// same series already registered (another manager of the process: the tests
// run several) keeps reporting them: c is left out rather than failing the
// manager.
func collectUntilDone(ctx context.Context, reg prometheus.Registerer, c prometheus.Collector) error {
	err := reg.Register(c)
	if _, taken := errors.AsType[prometheus.AlreadyRegisteredError](err); taken {
		<-ctx.Done()
		return nil
	}
	if err != nil {
		return err
	}
	defer reg.Unregister(c)
	<-ctx.Done()
	return nil
}
