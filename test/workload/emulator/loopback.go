package emulator

import (
	"fmt"
	"net/netip"
	"os/exec"
)

// Loopback binds addresses to the loopback interface of the network
// namespace the emulator runs in, so that an emulated API server answers at
// its cluster's endpoint exactly while the platform routes the address to
// a control plane that binds it: as on the device, where the address is
// bound to lo and the platform delivers its packets there.
//
// It changes the network of whatever namespace it runs in: run it only in
// a namespace of its own (see the workload test's TestMain).
type Loopback struct{}

// Bind binds addr to lo; binding it again is no error.
func (Loopback) Bind(addr netip.Addr) error {
	return ip("addr", "replace", netip.PrefixFrom(addr, addr.BitLen()).String(), "dev", "lo")
}

// Unbind removes addr from lo.
func (Loopback) Unbind(addr netip.Addr) error {
	return ip("addr", "del", netip.PrefixFrom(addr, addr.BitLen()).String(), "dev", "lo")
}

// Bound tells whether addr is bound to lo.
func (Loopback) Bound(addr netip.Addr) (bool, error) {
	out, err := exec.Command("ip", "-o", "addr", "show", "dev", "lo", "to", netip.PrefixFrom(addr, addr.BitLen()).String()).Output()
	if err != nil {
		return false, fmt.Errorf("ip addr show: %w", err)
	}
	return len(out) > 0, nil
}

func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %v: %w: %s", args, err, out)
	}
	return nil
}
