package deviceplugin

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
	"github.com/gpud/gpud/pkg/simnode"
)

// TestCDISpecDriverEdits: the plugin's CDI spec carries the driver's
// files (nvcdi's common edits on the simulated NVML and a fake driver
// root) once, at spec level; written, it passes the CDI library's
// validation, and a container given a unit gets libcuda, nvidia-smi and
// the toolkit's hooks from that root.
func TestCDISpecDriverEdits(t *testing.T) {
	node := simnode.NewBuiltin("dgx-h100")
	version, ret := node.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		t.Fatalf("SystemGetDriverVersion() = %v", ret)
	}
	root := driverroottest.New(t, version)
	edits, err := driveredits.Generate(node, driveredits.Config{DriverRoot: root}, nil)
	if err != nil {
		t.Fatalf("driveredits.Generate() = %v", err)
	}
	spec := buildCDISpec(mpsSets(t), "", devnodes.Files{OnlyExisting: true, Root: t.TempDir()}, edits)
	dir := t.TempDir()
	if err := writeCDISpec(dir, spec); err != nil {
		t.Fatal(err)
	}
	libcuda := filepath.Join("/", driverroottest.LibDir, "libcuda.so."+version)
	if !slices.ContainsFunc(spec.ContainerEdits.Mounts, func(m *cdispec.Mount) bool {
		return m.HostPath == filepath.Join(root, libcuda) && m.ContainerPath == libcuda
	}) {
		t.Errorf("spec-level mounts %v lack %s from the driver root", spec.ContainerEdits.Mounts, libcuda)
	}

	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	ctr := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(ctr, cdiName("GPU-0000"), cdiName("GPU-0001")); err != nil {
		t.Fatalf("InjectDevices = %v, unresolved %v", err, unresolved)
	}
	for _, want := range []string{libcuda, "/usr/bin/nvidia-smi"} {
		if !slices.ContainsFunc(ctr.Mounts, func(m oci.Mount) bool { return m.Destination == want }) {
			t.Errorf("container mounts %v lack %s", ctr.Mounts, want)
		}
	}
	if ctr.Hooks == nil || !slices.ContainsFunc(ctr.Hooks.CreateContainer, func(h oci.Hook) bool {
		return slices.Contains(h.Args, "create-symlinks")
	}) {
		t.Errorf("container hooks %+v lack create-symlinks", ctr.Hooks)
	}
}
