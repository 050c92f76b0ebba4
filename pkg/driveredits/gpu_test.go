//go:build gpu

package driveredits

import (
	"path"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// TestGenerateRealDriver: on a GPU node with the driver installed at /,
// the edits mount libcuda and libnvidia-ml of the running driver and
// nvidia-smi. Run with go test -tags gpu ./pkg/driveredits.
func TestGenerateRealDriver(t *testing.T) {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Skipf("NVML: %v", ret)
	}
	t.Cleanup(func() { _ = lib.Shutdown() })
	version, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		t.Fatalf("SystemGetDriverVersion() = %v", ret)
	}
	edits, err := Generate(lib, Config{}, nil)
	if err != nil {
		t.Fatalf("Generate() = %v", err)
	}
	for _, want := range []string{"libcuda.so." + version, "libnvidia-ml.so." + version, "nvidia-smi"} {
		if !slices.ContainsFunc(edits.Mounts, func(m *cdispec.Mount) bool { return path.Base(m.ContainerPath) == want }) {
			t.Errorf("no mount of %s in %v", want, edits.Mounts)
		}
	}
	t.Logf("%d mounts, %d hooks, env %v", len(edits.Mounts), len(edits.Hooks), edits.Env)
}
