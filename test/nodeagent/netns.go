package nodeagent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// listenIn listens on addr inside the network namespace at path. The
// socket stays in that namespace. The thread that entered it goes back to
// its own namespace before the runtime may use it again; should that fail,
// it stays locked and exits with its goroutine. Exiting is not enough on
// its own: were the goroutine on the main thread, the runtime would park
// that thread instead, and the process (its /proc/<pid>/ns/net) would stay
// in the machine's namespace, keeping it and its veths alive (seen: the
// test found its own process in a deleted machine's namespace).
func listenIn(path, addr string) (net.Listener, error) {
	var ln net.Listener
	err := in(path, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// Dial connects to addr from inside the machine's network namespace, as a
// process of the machine would: what a test uses to reach the machine's
// services on its VLAN addresses.
func (m *Machine) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := in(filepath.Join("/run/netns", m.Netns), func() (err error) {
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// in runs fn on a thread inside the network namespace at path; a socket fn
// opens stays in that namespace.
func in(path string, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- err
			return
		}
		defer own.Close()
		f, err := os.Open(path)
		if err != nil {
			ch <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- os.NewSyscallError("setns", err)
			return
		}
		err = fn()
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}
