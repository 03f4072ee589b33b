package nodeagent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	metalv1 "github.com/equinix/equinix-sdk-go/services/metalv1"
)

// hierarchies are the cgroup v1 hierarchies of this host each machine gets
// a group in (the folders of /sys/fs/cgroup: cpu,cpuacct and not its
// symlinks): its processes are found
// (and killed) through pids, a test reads what it used from memory and
// cpu, and a kubelet in it finds every controller it checks for, its
// groups under the machine's.
func hierarchies() ([]string, error) {
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		// unified is the v2 hierarchy of the hybrid layout and systemd a
		// named one: neither has controllers.
		if e.IsDir() && e.Name() != "unified" && e.Name() != "systemd" {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// BootDone is the file, in a machine's root, the boot writes the exit
// status of each cloud-init stage to once cloud-init is done.
const BootDone = "/var/lib/nodeagent/booted"

// Machine is a device running on this host.
type Machine struct {
	DeviceID, Hostname string
	// Netns is the name of its network namespace (ip netns).
	Netns string
	// Upper is the overlay's upper directory: what the machine wrote to its
	// root, readable from the host.
	Upper string
	// Cgroups are its groups, one per hierarchy.
	Cgroups []string

	agent *Agent
	index int
	dir   string
	ports []string
	cmd   *exec.Cmd
	// exited is closed once the machine's first process has exited.
	exited chan struct{}
	proxy  *proxy

	mu sync.Mutex
	// links are the fabric sides of its VLAN interfaces, each with the
	// bridge it is wired to ("" when none).
	links map[string]string
}

// start starts the machine of device d, the agent's index-th.
func (a *Agent) start(d *metalv1.Device, index int, vxlans map[string]int) (m *Machine, err error) {
	if index > 254 {
		return nil, fmt.Errorf("more than 254 machines")
	}
	m = &Machine{
		DeviceID: d.GetId(), Hostname: d.GetHostname(), Netns: fmt.Sprintf("%s-m%d", a.Fabric, index),
		agent: a, index: index, dir: filepath.Join(a.dir, fmt.Sprintf("m%d", index)),
		exited: make(chan struct{}), links: map[string]string{},
	}
	m.Upper = filepath.Join(m.dir, "upper")
	a.opts.Logf("nodeagent: device %s (%s) is active: starting machine %d", m.DeviceID, m.Hostname, index)
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("starting the machine of device %s: %w", m.DeviceID, err), m.stop())
			m = nil
		}
	}()
	if err := m.network(d); err != nil {
		return m, err
	}
	if err := m.wire(vxlans, nil); err != nil {
		return m, err
	}
	if err := m.seed(d); err != nil {
		return m, err
	}
	return m, m.boot()
}

// network creates the machine's network namespace, its ports as veths
// whose other ends stay in the fabric, unwired (no Layer 3 network is
// emulated), and the metadata service's address on its loopback.
func (m *Machine) network(d *metalv1.Device) error {
	fabric := m.agent.Fabric
	if err := run("ip", "netns", "add", m.Netns); err != nil {
		return err
	}
	if err := run("ip", "-n", m.Netns, "link", "set", "lo", "up"); err != nil {
		return err
	}
	listen, err := netip.ParseAddrPort(m.agent.opts.MetadataListen)
	if err != nil {
		return fmt.Errorf("metadata listen address: %w", err)
	}
	if err := run("ip", "-n", m.Netns, "addr", "add", netip.PrefixFrom(listen.Addr(), listen.Addr().BitLen()).String(), "dev", "lo"); err != nil {
		return err
	}
	for _, p := range d.GetNetworkPorts() {
		name := p.GetName()
		peer := []string{"peer", "name", name, "netns", m.Netns}
		if mac := p.Data.GetMac(); mac != "" {
			peer = append(peer, "address", mac)
		}
		outer := m.fabricName(name, 0)
		if err := run("ip", append([]string{"-n", fabric, "link", "add", outer, "type", "veth"}, peer...)...); err != nil {
			return err
		}
		if err := run("ip", "-n", fabric, "link", "set", outer, "up"); err != nil {
			return err
		}
		if err := run("ip", "-n", m.Netns, "link", "set", name, "up"); err != nil {
			return err
		}
		m.ports = append(m.ports, name)
	}
	src := netip.AddrFrom4([4]byte{127, 0, 77, byte(m.index)})
	if err := m.agent.opts.Bind(src, m.DeviceID); err != nil {
		return err
	}
	m.proxy, err = startProxy(filepath.Join("/run/netns", m.Netns), listen.String(), src, m.agent.opts.Metadata)
	return err
}

// fabricName is the name of the fabric's end of the machine's port (vxlan
// 0) or of its VLAN interface on that port.
func (m *Machine) fabricName(port string, vxlan int) string {
	short := map[string]string{"bond0": "b", "eth0": "e0", "eth1": "e1"}[port]
	if short == "" {
		short = port
	}
	if vxlan == 0 {
		return fmt.Sprintf("m%d%s", m.index, short)
	}
	return fmt.Sprintf("m%d%s.%d", m.index, short, vxlan)
}

// wire gives each port a VLAN interface, <port>.<vxlan>, for each of the
// project's VLANs, and wires its fabric end to the VLAN's bridge exactly
// when assigned says the simulator has the VLAN on the port: a port the
// VLAN is not assigned to reaches nothing on it.
func (m *Machine) wire(vxlans map[string]int, assigned map[string]map[int]bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	fabric := m.agent.Fabric
	var sorted []int
	for _, vx := range vxlans {
		sorted = append(sorted, vx)
	}
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	for _, port := range m.ports {
		for _, vx := range sorted {
			outer := m.fabricName(port, vx)
			inner := fmt.Sprintf("%s.%d", port, vx)
			current, exists := m.links[outer]
			if !exists {
				if err := run("ip", "-n", fabric, "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", m.Netns); err != nil {
					return err
				}
				if err := run("ip", "-n", fabric, "link", "set", outer, "up"); err != nil {
					return err
				}
				m.links[outer] = ""
			}
			want := ""
			if assigned[port][vx] {
				want = fmt.Sprintf("br%d", vx)
			}
			if want == current {
				continue
			}
			if want == "" {
				if err := run("ip", "-n", fabric, "link", "set", outer, "nomaster"); err != nil {
					return err
				}
			} else {
				if err := m.agent.bridge(want); err != nil {
					return err
				}
				if err := run("ip", "-n", fabric, "link", "set", outer, "master", want); err != nil {
					return err
				}
			}
			m.agent.opts.Logf("nodeagent: machine %d: %s wired to %q", m.index, inner, want)
			m.links[outer] = want
		}
	}
	return nil
}

// bridge makes sure the fabric has the bridge.
func (a *Agent) bridge(name string) error {
	if err := exec.Command("ip", "-n", a.Fabric, "link", "show", name).Run(); err == nil {
		return nil
	}
	if err := run("ip", "-n", a.Fabric, "link", "add", name, "type", "bridge"); err != nil {
		return err
	}
	return run("ip", "-n", a.Fabric, "link", "set", name, "up")
}

// seed writes the device's user-data and metadata as a NoCloud seed into
// the machine's root, where the image's cloud-init looks.
func (m *Machine) seed(d *metalv1.Device) error {
	for _, sub := range []string{"upper", "work", "root"} {
		if err := os.MkdirAll(filepath.Join(m.dir, sub), 0o755); err != nil {
			return err
		}
	}
	seed := filepath.Join(m.Upper, "var/lib/cloud/seed/nocloud")
	if err := os.MkdirAll(seed, 0o755); err != nil {
		return err
	}
	meta := fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", d.GetId(), d.GetHostname())
	if err := os.WriteFile(filepath.Join(seed, "meta-data"), []byte(meta), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(seed, "user-data"), []byte(d.GetUserdata()), 0o600)
}

// bootScript runs in the machine's new namespaces: it mounts the overlay
// and the kernel's file systems in its own mount namespace (the host sees
// none of them) and runs cloud-init's four stages in its root, as the
// image's systemd units would, then stays up as the machine's first
// process.
const bootScript = `set -eu
root="$DIR/root"
mount -t overlay overlay -o "lowerdir=$LOWER,upperdir=$DIR/upper,workdir=$DIR/work" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
# The cgroup namespace's roots are the machine's groups.
mount -t tmpfs -o mode=755 cgroup "$root/sys/fs/cgroup"
for h in $HIERARCHIES; do
  mkdir "$root/sys/fs/cgroup/$h"
  mount -t cgroup -o "$h" cgroup "$root/sys/fs/cgroup/$h"
  case $h in *,*)
    for c in $(echo "$h" | tr , ' '); do ln -s "$h" "$root/sys/fs/cgroup/$c"; done ;;
  esac
done
mount -t tmpfs -o mode=755 tmpfs "$root/run"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
mount -t tmpfs -o mode=755 tmpfs "$root/dev"
for d in null zero full random urandom tty kmsg; do
  touch "$root/dev/$d"
  mount --bind "/dev/$d" "$root/dev/$d"
done
mkdir "$root/dev/pts" "$root/dev/shm"
ln -s /proc/self/fd "$root/dev/fd"
hostname "$HOSTNAME"
exec chroot "$root" /bin/bash -c '
  for service in /usr/local/lib/nodeagent/boot.d/*; do
    if [ -x "$service" ]; then
      echo "nodeagent: starting $service"
      "$service" || echo "nodeagent: $service failed: $?"
    fi
  done
  stages=
  cloud-init init --local; stages="init-local=$?"
  cloud-init init; stages="$stages init=$?"
  cloud-init modules --mode config; stages="$stages config=$?"
  cloud-init modules --mode final; stages="$stages final=$?"
  mkdir -p "$(dirname "$DONE")"
  echo "$stages" >"$DONE"
  exec sleep infinity'
`

// boot starts the machine's first process in its cgroups and namespaces.
func (m *Machine) boot() error {
	names, err := hierarchies()
	if err != nil {
		return err
	}
	var join []string
	for _, h := range names {
		dir := filepath.Join("/sys/fs/cgroup", h, m.Netns)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		m.Cgroups = append(m.Cgroups, dir)
		// A new cpuset group has no CPUs and no memory nodes: no process
		// could join it.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if data, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
					return err
				}
			}
		}
		join = append(join, fmt.Sprintf("echo $$ >%s/cgroup.procs", dir))
	}
	// The shell joins the groups, then becomes nsenter, which enters the
	// network namespace and becomes unshare, whose child is the new pid
	// namespace's first process; with --cgroup the groups are its root.
	script := strings.Join(join, " && ") + ` && exec nsenter --net=/run/netns/"$NETNS" ` +
		`unshare --mount --pid --uts --cgroup --fork --kill-child -- /bin/sh -c "$BOOT"`
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), "NETNS="+m.Netns, "BOOT="+bootScript, "DIR="+m.dir,
		"LOWER="+strings.Join(append(slices.Clone(m.agent.opts.Layers), filepath.Join(m.agent.dir, imageMount)), ":"),
		"HOSTNAME="+m.Hostname, "DONE="+BootDone, "HIERARCHIES="+strings.Join(names, " "))
	log, err := os.Create(filepath.Join(m.dir, "console.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	m.cmd = cmd
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(m.exited)
	}()
	return nil
}

// Console is what the machine's boot wrote to its standard output and
// error: the cloud-init stages' output.
func (m *Machine) Console() string {
	data, _ := os.ReadFile(filepath.Join(m.dir, "console.log"))
	return string(data)
}

// File reads a file of the machine's root that it wrote (the upper layer).
func (m *Machine) File(path string) (string, error) {
	data, err := os.ReadFile(filepath.Join(m.Upper, path))
	return string(data), err
}

// stop kills the machine's processes and removes its cgroups, network
// namespace (and with it its veths, whose fabric ends leave their bridges)
// and files.
func (m *Machine) stop() error {
	var errs []error
	if m.cmd != nil {
		for _, dir := range m.Cgroups {
			if err := killAll(dir); err != nil {
				errs = append(errs, err)
			}
		}
		_ = m.cmd.Process.Kill()
		select {
		case <-m.exited:
		case <-time.After(30 * time.Second):
			errs = append(errs, fmt.Errorf("machine %d: its first process did not exit", m.index))
		}
	}
	if m.proxy != nil {
		m.proxy.close()
	}
	for _, dir := range m.Cgroups {
		if err := rmdirRetry(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", m.Netns)); err == nil {
		errs = append(errs, run("ip", "netns", "del", m.Netns))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.RemoveAll(m.dir)
}

// killAll kills the processes of the group and of the groups under it (a
// kubelet's Pods) until none is left.
func killAll(dir string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var pids []string
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			pids = append(pids, strings.Fields(string(data))...)
			return err
		})
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of %s do not die", pids, dir)
		}
		for _, p := range pids {
			var pid int
			if _, err := fmt.Sscan(p, &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rmdirRetry removes an emptied cgroup and the groups under it, deepest
// first; the kernel may take a moment to let go of the group of processes
// just killed.
func rmdirRetry(dir string) error {
	var subs []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && path != dir {
			subs = append(subs, path)
		}
		return nil
	})
	for i := len(subs) - 1; i >= 0; i-- {
		if err := rmdirRetry(subs[i]); err != nil {
			return err
		}
	}
	var err error
	for range 100 {
		if err = os.Remove(dir); err == nil || os.IsNotExist(err) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// proxy forwards the connections a machine makes to the metadata address
// to the simulator's metadata service, from a loopback source address of
// the machine's own, which the simulator binds to the device.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func startProxy(netns, listen string, src netip.Addr, target string) (*proxy, error) {
	ln, err := listenIn(netns, listen)
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, conns: map[net.Conn]bool{}}
	dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: 10 * time.Second}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				up, err := dialer.Dial("tcp", target)
				if err != nil {
					c.Close()
					return
				}
				if !p.track(c, up) {
					return
				}
				done := make(chan struct{}, 2)
				pipe := func(dst, src net.Conn) {
					_, _ = io.Copy(dst, src)
					if tc, ok := dst.(*net.TCPConn); ok {
						_ = tc.CloseWrite()
					}
					done <- struct{}{}
				}
				go pipe(up, c)
				go pipe(c, up)
				<-done
				<-done
				p.untrack(c, up)
			}()
		}
	}()
	return p, nil
}

// track records open connections so that close can end them: a socket
// keeps its network namespace alive after ip netns del.
func (p *proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = true
	}
	return true
}

func (p *proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
