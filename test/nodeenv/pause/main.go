// Command pause is the node environment's pod sandbox program (what
// registry.k8s.io/pause does): it holds the pod's namespaces, reaps
// orphans, and exits on SIGINT or SIGTERM. Built static, it is the only
// file of the sandbox image nodeenv imports into containerd (the node
// cannot pull images).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
