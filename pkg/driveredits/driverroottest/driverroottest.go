// Package driverroottest lays out a fake NVIDIA driver root for tests of
// CDI specs that carry the driver's files (pkg/driveredits): files only,
// no working driver.
package driverroottest

import (
	"os"
	"path/filepath"
	"testing"
)

// LibDir is where the fake root keeps the driver's libraries, as a
// Debian/Ubuntu x86_64 host does.
const LibDir = "usr/lib/x86_64-linux-gnu"

// New lays out a driver of version in a temp dir and returns the dir:
// the versioned libraries (libcuda.so.<version>, libnvidia-ml.so.<version>,
// libnvidia-ptxjitcompiler.so.<version>) with their .so.1 SONAME links in
// [LibDir], and nvidia-smi in usr/bin. Names in omit are left out (for
// example "libcuda.so"). version must be what the test's NVML reports
// from SystemGetDriverVersion, or nvcdi finds no driver.
func New(t testing.TB, version string, omit ...string) string {
	t.Helper()
	root := t.TempDir()
	libDir := filepath.Join(root, LibDir)
	binDir := filepath.Join(root, "usr/bin")
	for _, d := range []string{libDir, binDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	skip := map[string]bool{}
	for _, o := range omit {
		skip[o] = true
	}
	for _, l := range []string{"libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"} {
		if skip[l] {
			continue
		}
		if err := os.WriteFile(filepath.Join(libDir, l+"."+version), []byte("\x7fELF"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(l+"."+version, filepath.Join(libDir, l+".1")); err != nil {
			t.Fatal(err)
		}
	}
	if !skip["nvidia-smi"] {
		if err := os.WriteFile(filepath.Join(binDir, "nvidia-smi"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}
