// Package chaos runs two replicas of the real ipam-manager binary, as
// separate processes, against one real kube-apiserver while a client churns
// claims, and does to the replicas what happens to pods: the leader killed
// (SIGKILL) and restarted, the leader frozen (SIGSTOP) past its lease and
// resumed, and two replicas without leader election. Each scenario ends with
// the checks of test/chaos/invariant on what the API server holds.
//
// It takes minutes, so it runs only under `make test-chaos`, which sets
// REQUIRE_CHAOS=1; plain `go test ./...` skips it. docs/reliability.md has
// the figures.
package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

var (
	env *testenv.Environment
	// manager is the ipam-manager binary built from this tree.
	manager string
	// kubeconfig reaches env as an administrator.
	kubeconfig string
	// setupErr is why the environment could not start; every test fails
	// with it.
	setupErr error
)

func TestMain(m *testing.M) {
	if os.Getenv("REQUIRE_CHAOS") != "1" {
		fmt.Println("chaos tests skipped: run them with make test-chaos (REQUIRE_CHAOS=1)")
		os.Exit(0)
	}
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	dir, err := os.MkdirTemp("", "chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	stop, err := start(dir)
	if err != nil {
		setupErr = err
	}
	code := m.Run()
	if stop != nil {
		stop()
	}
	return code
}

// start builds the manager once into dir and starts the API server.
func start(dir string) (stop func(), err error) {
	env, err = testenv.Start(testenv.Options{})
	if err != nil {
		return nil, err
	}
	stop = func() { _ = env.Stop() }
	manager = filepath.Join(dir, "ipam-manager")
	if _, err := testenv.RunTool(env.Root, nil, "go", "build", "-o", manager, "./ipam"); err != nil {
		return stop, err
	}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	return stop, env.WriteKubeconfig(kubeconfig)
}

func requireEnv(t *testing.T) {
	t.Helper()
	if setupErr != nil {
		t.Fatalf("the environment did not start: %v", setupErr)
	}
}
