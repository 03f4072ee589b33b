package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	ipammanager "github.com/metal-vrf/cluster-api-metal-vrf/ipam/manager"
	"github.com/metal-vrf/cluster-api-metal-vrf/test/testenv"
)

// Leader election is timed short so that takeovers happen within seconds;
// the freeze outlasts the lease by a margin.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

// replica is one ipam-manager process, started again whenever it exits until
// it is stopped: a Deployment's pod restarted by its kubelet.
type replica struct {
	name        string
	args        []string
	metricsPort int
	logs        io.Writer

	mu       sync.Mutex
	proc     *os.Process
	stopping bool
	// starts counts the processes started, the first one included.
	starts int
	done   chan struct{}
}

// startReplica starts a replica of the manager with its own health and
// metrics ports, its allocation records in namespace; leaderElect turns
// leader election on with its lease there too.
func startReplica(name, namespace string, leaderElect bool, logs io.Writer) (*replica, error) {
	health, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	metrics, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig=" + kubeconfig, "--webhook-port=0", "--allocation-namespace=" + namespace,
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", health),
		fmt.Sprintf("--diagnostics-address=127.0.0.1:%d", metrics), "--insecure-diagnostics",
	}
	if leaderElect {
		args = append(args, "--leader-elect", "--leader-election-namespace="+namespace,
			"--leader-elect-lease-duration="+leaseDuration.String(),
			"--leader-elect-renew-deadline="+renewDeadline.String(),
			"--leader-elect-retry-period="+retryPeriod.String())
	}
	r := &replica{name: name, args: args, metricsPort: metrics, logs: logs, done: make(chan struct{})}
	r.mu.Lock()
	err = r.startProcess()
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	go r.supervise()
	return r, nil
}

// startProcess starts the next process; r.mu must be held.
func (r *replica) startProcess() error {
	cmd := exec.Command(manager, r.args...)
	cmd.Stdout, cmd.Stderr = r.logs, r.logs
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", r.name, err)
	}
	r.proc = cmd.Process
	r.starts++
	return nil
}

// supervise waits for each process to exit and starts the next, until stop.
func (r *replica) supervise() {
	defer close(r.done)
	for {
		r.mu.Lock()
		proc := r.proc
		r.mu.Unlock()
		state, _ := proc.Wait()
		// Deciding and starting under one lock: stop either sees the new
		// process or stops this loop before it starts one.
		r.mu.Lock()
		if r.stopping {
			r.mu.Unlock()
			return
		}
		fmt.Fprintf(r.logs, "=== chaos: %s exited (%v); starting it again\n", r.name, state)
		err := r.startProcess()
		r.mu.Unlock()
		if err != nil {
			fmt.Fprintf(r.logs, "=== chaos: %v\n", err)
			return
		}
	}
}

// signal sends sig to the replica's current process.
func (r *replica) signal(sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.logs, "=== chaos: %s pid %d gets %v\n", r.name, r.proc.Pid, sig)
	return r.proc.Signal(sig)
}

// restarts is how many times the replica was started again.
func (r *replica) restarts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starts - 1
}

// stop resumes the replica if frozen and ends it with SIGTERM.
func (r *replica) stop() {
	r.mu.Lock()
	r.stopping = true
	_ = r.proc.Signal(syscall.SIGCONT)
	_ = r.proc.Signal(syscall.SIGTERM)
	r.mu.Unlock()
	<-r.done
}

// leaderMetric is the gauge controller-runtime sets to 1 while it leads.
var leaderMetric = fmt.Sprintf("leader_election_master_status{name=%q} 1", ipammanager.LeaderElectionID)

// leads tells whether the replica's metrics say it holds the lease. A
// replica that does not answer (starting, frozen) does not lead as far as
// the test can tell.
func (r *replica) leads(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", r.metricsPort), nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	scanner := bufio.NewScanner(resp.Body)
	for scanner.Scan() {
		if strings.TrimSpace(scanner.Text()) == leaderMetric {
			return true
		}
	}
	return false
}

// leader returns the replica that leads, waiting for one to.
func leader(ctx context.Context, replicas []*replica) (*replica, error) {
	for {
		for _, r := range replicas {
			if r.leads(ctx) {
				return r, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no replica became leader: %w", ctx.Err())
		case <-time.After(retryPeriod):
		}
	}
}
