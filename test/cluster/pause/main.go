// Command pause is the sandbox image's process for test/cluster's node: it
// holds a Pod's namespaces and exits on SIGTERM or SIGINT, as Kubernetes'
// own pause does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
