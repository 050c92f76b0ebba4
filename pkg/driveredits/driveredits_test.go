package driveredits

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpud/gpud/pkg/simnode"
)

// FakeDriverRoot lays out a driver of version under a temp dir as a
// Debian/Ubuntu host has it: the versioned libraries in
// usr/lib/x86_64-linux-gnu with their SONAME links, and nvidia-smi in
// usr/bin. withLibcuda false leaves libcuda out.
func fakeDriverRoot(t *testing.T, version string, withLibcuda bool) string {
	t.Helper()
	root := t.TempDir()
	libDir := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	binDir := filepath.Join(root, "usr/bin")
	for _, d := range []string{libDir, binDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	libs := []string{"libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"}
	if withLibcuda {
		libs = append(libs, "libcuda.so")
	}
	for _, l := range libs {
		if err := os.WriteFile(filepath.Join(libDir, l+"."+version), []byte("ELF"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(l+"."+version, filepath.Join(libDir, l+".1")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(binDir, "nvidia-smi"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func mountOf(edits cdispec.ContainerEdits, containerPath string) *cdispec.Mount {
	for _, m := range edits.Mounts {
		if m.ContainerPath == containerPath {
			return m
		}
	}
	return nil
}

func hookArgs(edits cdispec.ContainerEdits) [][]string {
	var out [][]string
	for _, h := range edits.Hooks {
		out = append(out, h.Args)
	}
	return out
}

func TestGenerate(t *testing.T) {
	node := simnode.NewBuiltin("dgx-h100")
	version, ret := node.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		t.Fatalf("SystemGetDriverVersion() = %v", ret)
	}
	root := fakeDriverRoot(t, version, true)
	const hook = "/opt/toolkit/nvidia-cdi-hook"

	edits, err := Generate(node, Config{DriverRoot: root, HookPath: hook}, nil)
	if err != nil {
		t.Fatalf("Generate() = %v", err)
	}
	if out, err := json.MarshalIndent(edits, "", "  "); err == nil {
		t.Logf("edits: %s", out)
	}
	for _, p := range []string{
		"/usr/lib/x86_64-linux-gnu/libcuda.so." + version,
		"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so." + version,
		"/usr/bin/nvidia-smi",
	} {
		m := mountOf(edits, p)
		if m == nil {
			t.Errorf("no mount at %s; mounts: %v", p, edits.Mounts)
			continue
		}
		if m.HostPath != filepath.Join(root, p) {
			t.Errorf("mount at %s from %s, want %s", p, m.HostPath, filepath.Join(root, p))
		}
		if !slices.Contains(m.Options, "ro") {
			t.Errorf("mount at %s options %v, want read-only", p, m.Options)
		}
	}
	if len(edits.DeviceNodes) != 0 {
		t.Errorf("device nodes %v, want none (pkg/devnodes names them)", edits.DeviceNodes)
	}
	if len(edits.Hooks) == 0 {
		t.Fatal("no hooks")
	}
	var names []string
	for _, h := range edits.Hooks {
		if h.Path != hook {
			t.Errorf("hook %v runs %s, want %s", h.Args, h.Path, hook)
		}
		if len(h.Args) > 1 {
			names = append(names, h.Args[1])
		}
	}
	for _, want := range []string{"create-symlinks", "update-ldcache"} {
		if !slices.Contains(names, want) {
			t.Errorf("hooks %v lack %s", hookArgs(edits), want)
		}
	}
	if !slices.Contains(edits.Env, "NVIDIA_VISIBLE_DEVICES=void") {
		t.Errorf("env %v lacks NVIDIA_VISIBLE_DEVICES=void", edits.Env)
	}
}

func TestGenerateMissingDriver(t *testing.T) {
	node := simnode.NewBuiltin("dgx-h100")
	version, _ := node.SystemGetDriverVersion()
	tests := []struct {
		name string
		root string
	}{
		{name: "empty root", root: t.TempDir()},
		{name: "no libcuda", root: fakeDriverRoot(t, version, false)},
		{name: "other version", root: fakeDriverRoot(t, "535.1.2", true)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			edits, err := Generate(node, Config{DriverRoot: tc.root}, nil)
			if !errors.Is(err, ErrDriverFilesMissing) {
				t.Fatalf("Generate() = %v, %v; want %v", edits, err, ErrDriverFilesMissing)
			}
		})
	}
}
