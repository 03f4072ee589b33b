// Package nodeagent is test tooling that makes the Metal simulator's devices
// machines on this host: when the simulator says a device is active, the
// agent starts it in network, mount, pid, UTS and cgroup namespaces of its
// own, on an overlay of the Debian node image (test/node/image.sh), and runs
// the device's user-data, read through the SDK, through Debian's cloud-init.
// Its ports are veths; the VLANs the simulator has on each port (what CAPP's
// assignment batches asked for) decide which Linux bridge, one per VLAN in a
// network namespace of the agent's (the fabric), each VLAN interface is
// wired to. Deleting the device stops the machine and removes everything it
// had. The simulator itself stays a pure API: the agent only reads it
// through the SDK and binds each machine's metadata address (BindNode).
//
// The kernel here has no 802.1Q, bonding or dummy devices: bond0 and its
// VLAN sub-interfaces (bond0.<vxlan>, the names CAPP's network script
// writes) are veths created before the machine boots, one per port and
// project VLAN; ifupdown configures a pre-created interface of that name.
// make test-node keeps proving 802.1Q and bonds on a real kernel (qemu).
//
// It needs root, iproute2, util-linux (unshare, nsenter, mount) and cgroup
// v1 controllers mounted under /sys/fs/cgroup.
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// Options configure an Agent.
type Options struct {
	// API reads the simulator, in Project's scope.
	API     *metalv1.APIClient
	Project string
	// Metro is where the project's VLANs are looked up.
	Metro string
	// Image is the node image, an ext4 file system (rootfs.img).
	Image string
	// Layers are folders laid over the image, read-only, in every
	// machine's root, the first one on top (test/node/kubelayer.sh's
	// Kubernetes layer). Before cloud-init, the machine runs the
	// executables of /usr/local/lib/nodeagent/boot.d in its root, in
	// order: the services a node's systemd would start.
	Layers []string
	// Metadata is the host:port of the simulator's metadata service on this
	// host: a machine reaches it at MetadataListen.
	Metadata string
	// MetadataListen is the address:port the user-data's metadata URL
	// names, which each machine has on its loopback;
	// 169.254.169.254:80 when empty.
	MetadataListen string
	// Bind makes the simulator take requests from addr as coming from the
	// device (sim.Server.BindNode).
	Bind func(addr netip.Addr, deviceID string) error
	// Select, when set, picks the devices the agent runs (a rack of the
	// project's); nil runs all of them.
	Select func(*metalv1.Device) bool
	// Poll is how often the simulator is read; a second when zero.
	Poll time.Duration
	// Logf, when set, is told what the agent does.
	Logf func(format string, args ...any)
}

// Agent runs the project's active devices as machines.
type Agent struct {
	opts Options
	// dir holds the image's mount point and each machine's overlay.
	dir string
	// Fabric is the network namespace of the VLAN bridges.
	Fabric string
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	machines map[string]*Machine
	err      error
}

// machineIndex numbers the machines of all agents of the process: each
// machine's metadata connections come from a loopback address of its own
// (127.0.77.<index>), which the simulator binds to its device.
var machineIndex atomic.Int32

// imageMount is where, under the agent's directory, the image is mounted
// read-only: the lower layer all machines share.
const imageMount = "image"

// Start mounts the image, creates the fabric and starts following the
// simulator. Close undoes all of it.
func Start(opts Options) (*Agent, error) {
	if opts.Poll == 0 {
		opts.Poll = time.Second
	}
	if opts.MetadataListen == "" {
		opts.MetadataListen = "169.254.169.254:80"
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	dir, err := os.MkdirTemp("", "nodeagent-")
	if err != nil {
		return nil, err
	}
	a := &Agent{opts: opts, dir: dir, Fabric: "fabric-" + filepath.Base(dir)[len("nodeagent-"):],
		machines: map[string]*Machine{}, done: make(chan struct{})}
	if err := a.setUp(); err != nil {
		return nil, errors.Join(err, a.tearDown())
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go a.follow(ctx)
	return a, nil
}

func (a *Agent) setUp() error {
	lower := filepath.Join(a.dir, imageMount)
	if err := os.Mkdir(lower, 0o755); err != nil {
		return err
	}
	if err := run("mount", "-o", "loop,ro", a.opts.Image, lower); err != nil {
		return err
	}
	return run("ip", "netns", "add", a.Fabric)
}

// Dir is the agent's directory on this host: the image's mount point and
// the machines' overlays are under it.
func (a *Agent) Dir() string { return a.dir }

// Close stops every machine, removes the fabric and unmounts the image.
func (a *Agent) Close() error {
	if a.cancel != nil {
		a.cancel()
		<-a.done
	}
	var errs []error
	a.mu.Lock()
	for id, m := range a.machines {
		errs = append(errs, m.stop())
		delete(a.machines, id)
	}
	a.mu.Unlock()
	return errors.Join(append(errs, a.tearDown())...)
}

func (a *Agent) tearDown() error {
	var errs []error
	if _, err := os.Stat(filepath.Join("/run/netns", a.Fabric)); err == nil {
		errs = append(errs, run("ip", "netns", "del", a.Fabric))
	}
	lower := filepath.Join(a.dir, imageMount)
	if mounted(lower) {
		errs = append(errs, run("umount", lower))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.RemoveAll(a.dir)
}

// Machine is the running machine of a device, nil when there is none.
func (a *Agent) Machine(deviceID string) *Machine {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.machines[deviceID]
}

// Err is the last error the agent met following the simulator, nil when
// its last round went well.
func (a *Agent) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

func (a *Agent) follow(ctx context.Context) {
	defer close(a.done)
	t := time.NewTicker(a.opts.Poll)
	defer t.Stop()
	for {
		err := a.sync(ctx)
		if err != nil && ctx.Err() == nil {
			a.opts.Logf("nodeagent: %v", err)
		}
		a.mu.Lock()
		a.err = err
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sync makes the machines follow the simulator: a machine for each active
// device, none for a device that is gone, and each machine's VLAN
// interfaces wired to the bridges of the VLANs its ports have.
func (a *Agent) sync(ctx context.Context) error {
	list, _, err := a.opts.API.DevicesApi.FindProjectDevices(ctx, a.opts.Project).PerPage(1000).Execute()
	if err != nil {
		return fmt.Errorf("listing the devices: %w", err)
	}
	vlans, _, err := a.opts.API.VLANsApi.FindVirtualNetworks(ctx, a.opts.Project).Metro(a.opts.Metro).Execute()
	if err != nil {
		return fmt.Errorf("listing the VLANs: %w", err)
	}
	vxlans := map[string]int{}
	for _, v := range vlans.GetVirtualNetworks() {
		vxlans[v.GetId()] = int(v.GetVxlan())
	}
	var errs []error
	active := map[string]bool{}
	for _, d := range list.GetDevices() {
		if d.GetState() != metalv1.DEVICESTATE_ACTIVE || (a.opts.Select != nil && !a.opts.Select(&d)) {
			continue
		}
		active[d.GetId()] = true
		if err := a.ensure(ctx, &d, vxlans); err != nil {
			errs = append(errs, fmt.Errorf("device %s: %w", d.GetId(), err))
		}
	}
	a.mu.Lock()
	var gone []*Machine
	for id, m := range a.machines {
		if !active[id] {
			gone = append(gone, m)
		}
	}
	a.mu.Unlock()
	// A machine leaves the list once it is stopped and removed.
	for _, m := range gone {
		a.opts.Logf("nodeagent: device %s is gone: stopping its machine", m.DeviceID)
		errs = append(errs, m.stop())
		a.mu.Lock()
		delete(a.machines, m.DeviceID)
		a.mu.Unlock()
	}
	return errors.Join(errs...)
}

// ensure starts the device's machine if it has none, then wires its VLAN
// interfaces as the simulator has its ports.
func (a *Agent) ensure(ctx context.Context, d *metalv1.Device, vxlans map[string]int) error {
	a.mu.Lock()
	m := a.machines[d.GetId()]
	a.mu.Unlock()
	if m == nil {
		full, _, err := a.opts.API.DevicesApi.FindDeviceById(ctx, d.GetId()).Execute()
		if err != nil {
			return err
		}
		m, err = a.start(full, int(machineIndex.Add(1)), vxlans)
		if err != nil {
			return err
		}
		a.mu.Lock()
		a.machines[d.GetId()] = m
		a.mu.Unlock()
	}
	assigned := map[string]map[int]bool{}
	for _, p := range d.GetNetworkPorts() {
		port, _, err := a.opts.API.PortsApi.FindPortById(ctx, p.GetId()).Execute()
		if err != nil {
			return err
		}
		assigned[port.GetName()] = map[int]bool{}
		for _, v := range port.GetVirtualNetworks() {
			id := v.GetId()
			if id == "" {
				id = filepath.Base(v.GetHref())
			}
			if vx, ok := vxlans[id]; ok {
				assigned[port.GetName()][vx] = true
			}
		}
	}
	return m.wire(vxlans, assigned)
}

// run runs a command, its output in the error when it fails.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// IP runs ip(8) with args on this host and returns its output, trimmed;
// the output is in the error when it fails. Tests read and wire the
// fabric and the machines' namespaces with it.
func IP(args ...string) (string, error) {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// mounted reports whether something is mounted on dir, as this process's
// mount namespace sees it.
func mounted(dir string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescape(f[4]) == dir {
			return true
		}
	}
	return false
}

// unescape undoes mountinfo's octal escapes.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
