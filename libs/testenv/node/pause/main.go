// Command pause is the sandbox container of every pod on the real node: it holds the pod's
// namespaces, reaps the orphans it inherits as the pod's first process (with a shared process
// namespace), and exits on SIGINT or SIGTERM. Flotilla builds it into the node's pause image, since
// no image can be pulled from the internet here.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			if pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
