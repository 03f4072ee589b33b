package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/metal-vrf/cluster-api-metal-vrf/capp/cloudinit"
)

// guestfwdAddr is the guest's one way out: qemu hands each of its
// connections to this address to socat, which connects it to the VM's own
// listener on the host's loopback, which serves the simulator. (A chardev
// target would be one connection, made when qemu starts, for all of the
// guest's.) Nothing else leaves the VM (restrict=on).
const guestfwdAddr = "10.0.2.100"

// bootTimeout bounds one boot, from qemu's start to the probe's power-off.
const bootTimeout = 10 * time.Minute

// vm is a node: a copy of the image, booted as the simulator's device.
type vm struct {
	t        *testing.T
	dir      string
	disk     string
	deviceID string
	// macs are the MACs of the device's eth0 and eth1 in the simulator.
	macs [2]string
	// path is the VM's way to the simulator.
	path  *nodePath
	boots int
}

// newVM copies the image and seeds it, through NoCloud, with the device's
// user-data, and gives the VM the MACs of the device's NICs.
func newVM(t *testing.T, deviceID, hostname, userData string, macs [2]string, addr netip.Addr) *vm {
	t.Helper()
	dir := t.TempDir()
	v := &vm{t: t, dir: dir, disk: filepath.Join(dir, "disk.img"), deviceID: deviceID, macs: macs}
	run(t, "cp", "--sparse=always", filepath.Join(imageDir, "rootfs.img"), v.disk)
	seed := "/var/lib/cloud/seed/nocloud"
	writeFile(t, filepath.Join(dir, "user-data"), userData)
	writeFile(t, filepath.Join(dir, "meta-data"), fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", deviceID, hostname))
	writeFile(t, filepath.Join(dir, "seed.debugfs"), strings.Join([]string{
		"mkdir /var/lib/cloud", "mkdir /var/lib/cloud/seed", "mkdir " + seed, "cd " + seed,
		"write " + filepath.Join(dir, "user-data") + " user-data",
		"write " + filepath.Join(dir, "meta-data") + " meta-data",
	}, "\n")+"\n")
	run(t, "debugfs", "-w", "-f", filepath.Join(dir, "seed.debugfs"), v.disk)
	v.path = newNodePath(t, addr)
	if err := metalSim.BindNode(addr, deviceID); err != nil {
		t.Fatal(err)
	}
	return v
}

// boot runs the VM until its probe powers it off, with extra kernel
// arguments; the console goes to console-N.log.
func (v *vm) boot(kernelArgs ...string) {
	v.t.Helper()
	v.boots++
	console := filepath.Join(v.dir, fmt.Sprintf("console-%d.log", v.boots))
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	args := []string{
		"-machine", "pc", "-accel", accelerator(), "-m", "768", "-smp", "1",
		"-display", "none", "-monitor", "none", "-serial", "file:" + console, "-no-reboot",
		"-kernel", filepath.Join(imageDir, "vmlinuz"), "-initrd", filepath.Join(imageDir, "initrd.img"),
		// no_timer_check: under software emulation on a loaded host the
		// kernel's check of the IO-APIC timer can miss its ticks and panic
		// ("IO-APIC + timer doesn't work!"), seen once at load 17.
		"-append", strings.Join(append([]string{"root=/dev/vda", "rw", "console=ttyS0", "net.ifnames=0", "no_timer_check"}, kernelArgs...), " "),
		"-drive", "file=" + v.disk + ",format=raw,if=virtio",
		// eth0 and eth1, with the MACs of the device's ports. Only eth0's
		// network has a way out: to the simulator.
		"-netdev", fmt.Sprintf("user,id=n0,restrict=on,guestfwd=tcp:%s:80-cmd:socat - TCP:%s", guestfwdAddr, v.path.addr),
		"-device", "virtio-net-pci,netdev=n0,mac=" + v.macs[0],
		"-netdev", "user,id=n1,restrict=on",
		"-device", "virtio-net-pci,netdev=n1,mac=" + v.macs[1],
	}
	start := time.Now()
	out, err := exec.CommandContext(ctx, "qemu-system-x86_64", args...).CombinedOutput()
	v.t.Logf("boot %d of device %s took %s (qemu -accel %s)", v.boots, v.deviceID, time.Since(start).Round(time.Second), accelerator())
	if err != nil || ctx.Err() != nil {
		v.t.Fatalf("qemu: %v (%v): %s\nconsole:\n%s\ncloud-init's output:\n%s", err, ctx.Err(), out, tail(readFileOr(console), 30), tail(v.cloudInitLog(), 60))
	}
	// What the node did, for whoever reads a run: the console from
	// cloud-init's final stage, where the network script runs, through the
	// probe's output, to the power-off.
	log := readFileOr(console)
	if i := strings.LastIndex(log, "running 'modules:final'"); i >= 0 {
		log = log[i:]
	}
	if i := strings.Index(log, "node-probe: network state"); i >= 0 {
		if j := strings.Index(log[i:], "Stopped"); j >= 0 {
			log = log[:strings.LastIndex(log[:i+j], "\n")+1]
		}
	}
	v.t.Logf("boot %d of device %s, its console:\n%s", v.boots, v.deviceID, log)
}

// file is a file of the VM's disk, read back after it powered off; "" when
// it does not exist.
func (v *vm) file(path string) string {
	v.t.Helper()
	out, err := exec.Command("debugfs", "-R", "cat "+path, v.disk).Output()
	if err != nil {
		v.t.Fatalf("debugfs cat %s: %v", path, err)
	}
	return string(out)
}

// cloudInitLog is the output of cloud-init's stages, the network script's
// among them.
func (v *vm) cloudInitLog() string { return v.file("/var/log/cloud-init-output.log") }

// state is a snapshot the probe took of the node's network (image.sh).
type state struct {
	Link    []link  `json:"link"`
	Addr    []iface `json:"addr"`
	Route4  []route `json:"route4"`
	Route6  []route `json:"route6"`
	Kubelet string  `json:"kubelet"`
	// Files are the checksums of /etc/network's files and kubelet's
	// defaults.
	Files string `json:"files"`
}

// link is an entry of `ip -j -d link show`.
type link struct {
	Name     string   `json:"ifname"`
	Flags    []string `json:"flags"`
	Master   string   `json:"master"`
	Parent   string   `json:"link"`
	LinkInfo struct {
		Kind string `json:"info_kind"`
		Data struct {
			Protocol string `json:"protocol"`
			ID       int    `json:"id"`
		} `json:"info_data"`
	} `json:"linkinfo"`
}

// iface is an entry of `ip -j addr show`.
type iface struct {
	Name  string `json:"ifname"`
	Addrs []struct {
		Local     string `json:"local"`
		PrefixLen int    `json:"prefixlen"`
	} `json:"addr_info"`
}

// route is an entry of `ip -j route show`.
type route struct {
	Dst     string `json:"dst"`
	Gateway string `json:"gateway"`
	Dev     string `json:"dev"`
}

// probe reads the snapshot the probe wrote as name (boot.json, rerun.json).
func (v *vm) probe(name string) state {
	v.t.Helper()
	data := v.file("/var/lib/node-probe/" + name)
	var s state
	if err := json.Unmarshal([]byte(data), &s); err != nil {
		v.t.Fatalf("the probe's %s (%v): %q\ncloud-init's output:\n%s", name, err, data, tail(v.cloudInitLog(), 60))
	}
	return s
}

// link is the link named name; the zero link when there is none.
func (s state) link(name string) link {
	for _, l := range s.Link {
		if l.Name == name {
			return l
		}
	}
	return link{}
}

// addrs are the addresses of the interface, as address/prefix.
func (s state) addrs(name string) []string {
	var out []string
	for _, i := range s.Addr {
		if i.Name == name {
			for _, a := range i.Addrs {
				out = append(out, fmt.Sprintf("%s/%d", a.Local, a.PrefixLen))
			}
		}
	}
	return out
}

// nodePath is a VM's way to the simulator: a listener on the host's loopback
// that qemu's guestfwd rule connects to. Every VM reaches it from the
// host's 127.0.0.1, so two VMs booting at once would look alike to the
// simulator, which knows a node by its source address: each VM has a
// listener of its own, and the listener presents the VM's requests as
// coming from addr, the address the simulator binds to the device.
type nodePath struct {
	addr string
}

func newNodePath(t *testing.T, addr netip.Addr) *nodePath {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.RemoteAddr = netip.AddrPortFrom(addr, 40000).String()
			metalSim.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return &nodePath{addr: l.Addr().String()}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFileOr(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// rerunArg makes the probe run the network script again after a boot.
var rerunArg = "node-probe.rerun=" + cloudinit.ScriptPath
