package metalcalls

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
)

// provisionTimesEnv lists the provisioning times TestMetalRequestsPerProvisioningTime
// runs, comma-separated Go durations: METALCALLS_PROVISION_TIMES=5m,10m,15m
// runs the platform's own (a quarter of an hour of wall time).
const provisionTimesEnv = "METALCALLS_PROVISION_TIMES"

// defaultProvisionTimes are scaled down from the platform's 5 to 15
// minutes so that the test takes minutes. The manager's polls are requeues
// on controller-runtime's real clock, which nothing injects, so the test
// runs in real time; the simulator's clock is the real one too, so the
// device's age, its events and its progress agree with the manager's. The
// budget must hold at each of these times, and the counts must not grow
// with the time: a schedule that reads a provisioning device every so many
// seconds fails at the first already.
var defaultProvisionTimes = []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute}

// platformQueue is how long of its provisioning time a device is queued:
// the platform queues a device for seconds when it has the hardware, then
// provisions it for minutes.
const platformQueue = 20 * time.Second

// TestMetalRequestsPerProvisioningTime is TestMetalRequestsPerMachine's
// budget with devices that take the platform's minutes to provision
// (queued for platformQueue, then provisioning with a growing
// provisioning_percentage), each time in its own simulator, API server
// and manager, at once.
func TestMetalRequestsPerProvisioningTime(t *testing.T) {
	times := defaultProvisionTimes
	if v := os.Getenv(provisionTimesEnv); v != "" {
		times = nil
		for _, f := range strings.Split(v, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil {
				t.Fatalf("%s: %v", provisionTimesEnv, err)
			}
			times = append(times, d)
		}
	}
	// Minutes of three managers' info logs would drown the counts.
	ctrl.SetLogger(zap.New(zap.WriteTo(testWriter{t}), zap.Level(zapcore.ErrorLevel)))
	for _, provision := range times {
		t.Run(provision.String(), func(t *testing.T) {
			t.Parallel()
			requestsPerMachine(t, provision)
		})
	}
}

// requestsPerMachine counts the Metal requests of machines whose devices
// take provision to become active, from creation to provisioned and from
// deletion to gone.
func requestsPerMachine(t *testing.T, provision time.Duration) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(provision + 3*time.Minute)
	g.SetDefaultEventuallyPollingInterval(500 * time.Millisecond)
	ctx := context.Background()
	metalSim, k8s, ns := startWith(ctx, t, g, sim.Options{
		DeviceProvisionDelay: provision, DeviceQueueDelay: platformQueue,
		BatchDelay: time.Second, DeviceDeprovisionDelay: 2 * time.Second, MaxDevicesInFlight: 5,
	})

	before, reads := metalSim.TotalCalls(), metalSim.Calls(sim.OpFindDeviceByID)
	ms, pms := provisionMachines(ctx, g, k8s, ns)
	provisioning := metalSim.TotalCalls() - before
	reads = metalSim.Calls(sim.OpFindDeviceByID) - reads
	t.Logf("provisioning in %s: %d Metal requests for %d machines to be provisioned (%.1f each, of which %.1f device reads)",
		provision, provisioning, machines, float64(provisioning)/machines, float64(reads)/machines)

	// The budgets are checked at the end, so that a run over the first
	// still measures the second.
	before = metalSim.TotalCalls()
	deleteMachines(ctx, g, k8s, ms, pms)
	deleting := metalSim.TotalCalls() - before
	t.Logf("provisioning in %s: %d Metal requests for %d machines to be deleted (%.1f each)",
		provision, deleting, machines, float64(deleting)/machines)
	g.Expect(provisioning).To(BeNumerically("<=", machines*provisionBudget), "Metal requests from creation to provisioned")
	g.Expect(deleting).To(BeNumerically("<=", machines*deleteBudget), "Metal requests from deletion to gone")
}
