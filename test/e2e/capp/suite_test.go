// Package capp holds the CAPP consumer's end-to-end suite: a real
// kube-apiserver and etcd with CAPI's, CAPP's and both IPAM providers' CRDs;
// the CAPP manager and our IPAM manager in-process; and the reference
// in-cluster IPAM provider running as a peer process.
package capp

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	cappmanager "github.com/metal-vrf/cluster-api-metal-vrf/capp/manager"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

var (
	env   *testenv.Environment
	k8s   client.Client
	ctx   context.Context
	stops []func()
	// metalSim is the Metal API the CAPP manager drives, and metalAPI a
	// client of it through the real SDK, for the tests' own reads.
	metalSim *simtest.Sim
	metalAPI *metal.Client
	// logs holds the managers' logs, for the test that no token leaks.
	logs = &syncBuffer{}
	// stopCAPP stops the running CAPP manager.
	stopCAPP func()
)

// userToken is a user-level API key of the simulator, valid for every
// project, that only the credentials Secret of one test holds.
const userToken = "user-token-7f3a9e21c4"

// Simulated platform timings: short, but long enough that every state
// (provisioning, batch in flight, deprovisioning) is seen.
const (
	deviceProvisionDelay   = 2 * time.Second
	batchDelay             = time.Second
	deviceDeprovisionDelay = 2 * time.Second
	// nodeReportTimeout is the manager's --node-report-timeout.
	nodeReportTimeout = 40 * time.Second
)

func TestCAPP(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "CAPP consumer")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.MultiWriter(GinkgoWriter, logs)), zap.UseDevMode(true)))
	ctx = context.Background()
	var err error
	metalSim, err = simtest.Start(sim.Options{
		DeviceProvisionDelay:   deviceProvisionDelay,
		BatchDelay:             batchDelay,
		DeviceDeprovisionDelay: deviceDeprovisionDelay,
		MaxDevicesInFlight:     5,
		APIKeys:                []string{userToken},
	}, nil)
	Expect(err).NotTo(HaveOccurred())
	stops = append(stops, metalSim.Close)
	metalAPI, err = metal.NewClient(metal.Config{APIKey: simtest.APIKey, BaseURL: metalSim.URL, ProjectID: simtest.Project})
	Expect(err).NotTo(HaveOccurred())

	env, err = testenv.Start(testenv.Options{Webhooks: true, InClusterCRDs: true, CAPPCRDs: true})
	Expect(err).NotTo(HaveOccurred())

	k8s = env.Client

	stop, err := env.StartIPAM(ctx, env.IPAMOptions(2))
	Expect(err).NotTo(HaveOccurred())
	stops = append(stops, stop)
	stop, err = env.StartInCluster(GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())
	stops = append(stops, stop)
	stopCAPP, err = env.StartCAPP(ctx, cappOptions())
	Expect(err).NotTo(HaveOccurred())
	stops = append(stops, func() { stopCAPP() })

	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
})

var _ = AfterSuite(func() {
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// metadataURL is the metadata service the rendered script is told to use.
const metadataURL = "http://metadata.test/metadata"

// cappOptions are the CAPP manager's options: its credentials are the
// simulator's, from the environment the way an operator gives them.
func cappOptions() cappmanager.Options {
	opts := env.CAPPOptions(4, metadataURL)
	opts.Getenv = func(name string) string {
		return map[string]string{metal.EnvAPIKey: simtest.APIKey, metal.EnvBaseURL: metalSim.URL}[name]
	}
	opts.NodeReportTimeout = nodeReportTimeout
	opts.MetalRetry = metal.RetryPolicy{MaxAttempts: 2, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	return opts
}

// syncBuffer collects log lines written from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newNamespace creates a namespace of its own for one test.
func newNamespace() string {
	GinkgoHelper()
	ns, err := env.NewNamespace(ctx, "capp")
	Expect(err).NotTo(HaveOccurred())
	return ns
}
