package nodeagent

import (
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// listenIn listens on addr inside the network namespace at path. The
// socket stays in that namespace; the thread that entered it is never
// given back to the runtime (it exits with its goroutine), so no other
// goroutine ever runs in the machine's namespace by accident.
func listenIn(path, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
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
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}
