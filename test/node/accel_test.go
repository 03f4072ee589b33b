package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// kvmProbeTimeout bounds the probe: a guest under KVM prints its first
// console line within a second or two.
const kvmProbeTimeout = 20 * time.Second

// accelerator is qemu's -accel for the node VMs: kvm when a guest runs
// under it on this machine (a boot in seconds), else tcg, software
// emulation (70-80 s a boot). That /dev/kvm exists and qemu starts with it
// is not enough: on a nested VM of this machine kind qemu starts, spins and
// the guest never prints a line. So the probe boots the node's kernel under
// KVM and waits for its first console line.
var accelerator = sync.OnceValue(func() string {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return "tcg"
	}
	dir, err := os.MkdirTemp("", "kvm-probe-")
	if err != nil {
		return "tcg"
	}
	defer os.RemoveAll(dir)
	console := filepath.Join(dir, "console.log")
	ctx, cancel := context.WithTimeout(context.Background(), kvmProbeTimeout)
	defer cancel()
	qemu := exec.CommandContext(ctx, "qemu-system-x86_64", "-machine", "pc", "-accel", "kvm", "-m", "256",
		"-display", "none", "-monitor", "none", "-serial", "file:"+console, "-no-reboot",
		"-kernel", filepath.Join(imageDir, "vmlinuz"), "-append", "console=ttyS0 panic=-1")
	if err := qemu.Start(); err != nil {
		return "tcg"
	}
	defer func() { cancel(); _ = qemu.Wait() }()
	for ctx.Err() == nil {
		if data, _ := os.ReadFile(console); strings.Contains(string(data), "Linux version") {
			return "kvm"
		}
		time.Sleep(250 * time.Millisecond)
	}
	return "tcg"
})
