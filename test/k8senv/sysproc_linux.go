package k8senv

import "syscall"

// sysProcAttr kills a control-plane process when the test binary dies
// without running its cleanups (a panic, a -timeout), so none outlives it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
