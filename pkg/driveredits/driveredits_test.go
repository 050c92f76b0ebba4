package driveredits

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpud/gpud/pkg/driveredits/driverroottest"
	"github.com/gpud/gpud/pkg/simnode"
)

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
	root := driverroottest.New(t, version)
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
		{name: "no libcuda", root: driverroottest.New(t, version, "libcuda.so")},
		{name: "other version", root: driverroottest.New(t, "535.1.2")},
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

// TestGenerateHostDriverRoot: with the driver root mounted elsewhere in
// the agent's container, the mounts name the host's paths.
func TestGenerateHostDriverRoot(t *testing.T) {
	node := simnode.NewBuiltin("dgx-h100")
	version, _ := node.SystemGetDriverVersion()
	root := driverroottest.New(t, version)
	edits, err := Generate(node, Config{DriverRoot: root, HostDriverRoot: "/run/nvidia/driver"}, nil)
	if err != nil {
		t.Fatalf("Generate() = %v", err)
	}
	libcuda := "/usr/lib/x86_64-linux-gnu/libcuda.so." + version
	if m := mountOf(edits, libcuda); m == nil || m.HostPath != "/run/nvidia/driver"+libcuda {
		t.Errorf("mount at %s = %+v, want from /run/nvidia/driver%s", libcuda, m, libcuda)
	}
	for _, m := range edits.Mounts {
		if strings.HasPrefix(m.HostPath, root) {
			t.Errorf("mount %+v names the agent's view %s", m, root)
		}
	}
}
