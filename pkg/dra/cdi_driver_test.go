package dra

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpud/gpud/pkg/devnodes"
	"github.com/gpud/gpud/pkg/driveredits"
	"github.com/gpud/gpud/pkg/driveredits/driverroottest"
)

// TestPrepareAddsDriverEdits: a claim's CDI spec carries the driver's
// files (nvcdi's common edits on the simulated NVML and a fake driver
// root) once, at spec level; it passes the CDI library's validation, and
// a container the runtime gives the claim's device gets libcuda,
// nvidia-smi and the toolkit's hooks from that root.
func TestPrepareAddsDriverEdits(t *testing.T) {
	e := newPrepEnv(t, "dgx-h100", nil)
	version, ret := e.node.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		t.Fatalf("SystemGetDriverVersion() = %v", ret)
	}
	root := driverroottest.New(t, version)
	edits, err := driveredits.Generate(e.node, driveredits.Config{DriverRoot: root}, nil)
	if err != nil {
		t.Fatalf("driveredits.Generate() = %v", err)
	}
	p, err := NewPreparer(PreparerConfig{NodeName: e.name, StateDir: e.stateDir, CDIDir: e.cdiDir, Devices: e.tab.devices,
		DeviceFiles: devnodes.Files{OnlyExisting: true, Root: t.TempDir()}, DriverEdits: edits})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := prepareOne(t, p, claim("d", "d", alloc{pool: e.name, device: "gpu-0"}, alloc{pool: e.name, device: "gpu-1"}))
	if err != nil {
		t.Fatal(err)
	}

	spec := readSpec(t, e.cdiDir, "d") // parses and validates
	libcuda := filepath.Join("/", driverroottest.LibDir, "libcuda.so."+version)
	top := spec.ContainerEdits
	if !hasMount(top.Mounts, filepath.Join(root, libcuda), libcuda) {
		t.Errorf("spec-level mounts %v lack %s from the driver root", top.Mounts, libcuda)
	}
	for _, name := range []string{"d-gpu-0", "d-gpu-1"} {
		if d := spec.GetDevice(name); d == nil || len(d.ContainerEdits.Mounts) != 0 || len(d.ContainerEdits.Hooks) != 0 {
			t.Errorf("device %s = %+v, want no driver files of its own", name, d)
		}
	}

	cache, err := cdi.NewCache(cdi.WithSpecDirs(e.cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	ctr := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	var ids []string
	for _, d := range devs {
		ids = append(ids, d.CDIDeviceIDs...)
	}
	if unresolved, err := cache.InjectDevices(ctr, ids...); err != nil {
		t.Fatalf("InjectDevices(%v) = %v, unresolved %v", ids, err, unresolved)
	}
	for _, want := range []string{libcuda, "/usr/bin/nvidia-smi"} {
		n := 0
		for _, m := range ctr.Mounts {
			if m.Destination == want {
				n++
			}
		}
		if n != 1 {
			t.Errorf("container has %d mounts at %s, want 1; mounts %v", n, want, ctr.Mounts)
		}
	}
	if ctr.Hooks == nil || !slices.ContainsFunc(ctr.Hooks.CreateContainer, func(h oci.Hook) bool {
		return slices.Contains(h.Args, "update-ldcache")
	}) {
		t.Errorf("container hooks %+v lack update-ldcache", ctr.Hooks)
	}
}

// TestBuildCDISpecNoDriverEdits: without driver edits (a simulated node,
// or a driver nvcdi could not find) the spec is as before: no mounts or
// hooks at spec level.
func TestBuildCDISpecNoDriverEdits(t *testing.T) {
	e := newPrepEnv(t, "dgx-h100", nil)
	p := e.preparer()
	if _, err := prepareOne(t, p, claim("n", "n", alloc{pool: e.name, device: "gpu-0"})); err != nil {
		t.Fatal(err)
	}
	top := readSpec(t, e.cdiDir, "n").ContainerEdits
	if len(top.Mounts)+len(top.Hooks)+len(top.Env) != 0 {
		t.Errorf("spec-level edits = %+v, want none", top)
	}
}

func hasMount(ms []*cdispec.Mount, host, ctr string) bool {
	return slices.ContainsFunc(ms, func(m *cdispec.Mount) bool { return m.HostPath == host && m.ContainerPath == ctr })
}
