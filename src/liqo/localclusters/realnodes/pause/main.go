// The sandbox ("pause") process of every pod on a local real node.
//
// No registry can be reached here, so the upstream pause image cannot be pulled: this is its whole job,
// written again. It holds the pod's namespaces by merely existing, reaps the zombies of a shared process
// namespace (it is their PID 1), and exits at once on SIGTERM or SIGINT, so that a pod stops without
// waiting for the grace period to end in a SIGKILL.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for received := range signals {
		if received != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
