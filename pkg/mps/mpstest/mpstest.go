// Package mpstest builds the stand-in MPS control program
// (pkg/mps/testdata/fakemps) for tests that point a supervisor's driver
// root, or the agent's --driver-root, at it. It imports none of gpud's
// packages, so pkg/mps's own tests use it too.
package mpstest

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Build compiles the stand-in to dst, normally
// <driver root>/usr/bin/nvidia-cuda-mps-control (mps.ControlBinary under
// a temp driver root).
func Build(dst string) error {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return errors.New("mpstest: cannot locate the stand-in's source")
	}
	src := filepath.Join(filepath.Dir(file), "..", "testdata", "fakemps")
	cmd := exec.Command("go", "build", "-o", dst, ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mpstest: build the stand-in nvidia-cuda-mps-control: %w\n%s", err, out)
	}
	return nil
}
