// Package node boots the node configuration CAPP renders on a real kernel: a
// Debian VM under qemu (software emulation), seeded through NoCloud with the
// user-data the CAPP manager gave a PacketMachine's device in the simulator,
// reaching nothing but the simulator's metadata service. It runs only under
// `make test-node`, which builds the image (test/node/image.sh) and sets
// REQUIRE_NODE_BOOT=1; plain `go test ./...` skips it.
package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim"
	"github.com/metal-vrf/cluster-api-metal-vrf/shared/metal/sim/simtest"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// metadataURL is where the rendered script reads its metadata: the address
// qemu's guestfwd rule sends to the simulator (see vm_test.go).
const metadataURL = "http://" + guestfwdAddr + "/metadata"

var (
	env      *testenv.Environment
	metalSim *simtest.Sim
	metalAPI *metal.Client
	// imageDir holds rootfs.img, vmlinuz and initrd.img (image.sh).
	imageDir string
	// setupErr is why the environment could not start; every test fails
	// with it.
	setupErr error
)

func TestMain(m *testing.M) {
	if os.Getenv("REQUIRE_NODE_BOOT") != "1" {
		fmt.Println("node boot tests skipped: run them with make test-node (REQUIRE_NODE_BOOT=1)")
		os.Exit(0)
	}
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := start(ctx)
	if err != nil {
		setupErr = err
	}
	code := m.Run()
	for i := len(stop) - 1; i >= 0; i-- {
		stop[i]()
	}
	return code
}

// start starts the simulator, the API server and the IPAM and CAPP
// managers; stop holds what stops them, in order of start.
func start(ctx context.Context) (stop []func(), err error) {
	imageDir = os.Getenv("NODE_IMAGE")
	if imageDir == "" {
		return nil, fmt.Errorf("NODE_IMAGE is not set: make test-node builds the image and sets it")
	}
	for _, f := range []string{"rootfs.img", "vmlinuz", "initrd.img"} {
		if _, err := os.Stat(filepath.Join(imageDir, f)); err != nil {
			return nil, fmt.Errorf("the node image is incomplete: %w", err)
		}
	}
	metalSim, err = simtest.Start(sim.Options{DeviceProvisionDelay: time.Second, BatchDelay: time.Second}, nil)
	if err != nil {
		return nil, err
	}
	stop = append(stop, metalSim.Close)
	metalAPI, err = metal.NewClient(metal.Config{APIKey: simtest.APIKey, BaseURL: metalSim.URL, ProjectID: simtest.Project})
	if err != nil {
		return stop, err
	}
	env, err = testenv.Start(testenv.Options{Webhooks: true, CAPPCRDs: true})
	if err != nil {
		return stop, err
	}
	stop = append(stop, func() { _ = env.Stop() })
	s, err := env.StartIPAM(ctx, env.IPAMOptions(2))
	if err != nil {
		return stop, err
	}
	stop = append(stop, s)
	opts := env.CAPPOptions(2, metadataURL)
	opts.Getenv = func(name string) string {
		return map[string]string{metal.EnvAPIKey: simtest.APIKey, metal.EnvBaseURL: metalSim.URL}[name]
	}
	// A node under software emulation takes minutes to boot; the test, not
	// the manager, decides when it took too long.
	opts.NodeReportTimeout = time.Hour
	s, err = env.StartCAPP(ctx, opts)
	if err != nil {
		return stop, err
	}
	return append(stop, s), nil
}
