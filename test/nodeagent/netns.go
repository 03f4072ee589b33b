package nodeagent

import (
	"net"
	"os"
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
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer own.Close()
		f, err := os.Open(path)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: os.NewSyscallError("setns", err)}
			return
		}
		ln, err := net.Listen("tcp", addr)
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}
