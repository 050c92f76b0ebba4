//go:build !linux

package k8senv

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
