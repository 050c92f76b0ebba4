//go:build gpu

package memlimit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// realCgroupRoot is the cgroup2 mount the driver names cgroups under.
const realCgroupRoot = "/sys/fs/cgroup"

// TestRealGPUMemoryLimits checks, on a machine with an r615 or later
// driver, what the simulated node models of SetMemoryLimits_v1 and
// GetMemoryLimits_v1 (pkg/simnode/memlimits.go), on a real cgroup made for
// the test under /sys/fs/cgroup: the manager puts the GPU in driver mode;
// Set gives the cgroup soft = the request and hard = the limit, read back
// with nothing used; Sample reads that use; soft above hard and a limit
// above the GPU's memory are ERROR_INVALID_ARGUMENT; Clear leaves no limit;
// a removed cgroup answers ERROR_OPERATING_SYSTEM. It skips, saying why,
// without NVML, before r615, when NVML lacks the calls, without cgroup v2
// or root, and when no GPU is out of MIG mode. Run it alone with
//
//	go test -tags gpu -count=1 -v -run RealGPUMemoryLimits ./pkg/memlimit
//
// or with the other real-GPU checks: make test-gpu.
func TestRealGPUMemoryLimits(t *testing.T) {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Skipf("no NVML here (libnvidia-ml.so.1 not loaded or no driver): %v", ret)
	}
	t.Cleanup(func() { _ = lib.Shutdown() })
	version, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		t.Fatalf("SystemGetDriverVersion: %v", ret)
	}
	major, _, _ := strings.Cut(version, ".")
	if b, err := strconv.Atoi(major); err != nil || b < 615 {
		t.Skipf("driver %s predates r615: it has no per-cgroup GPU memory limits (nvmlDeviceSetMemoryLimits_v1)", version)
	}
	if _, err := os.Stat(filepath.Join(realCgroupRoot, "cgroup.controllers")); err != nil {
		t.Skipf("no cgroup v2 at %s (%v): the driver names a container by its cgroup v2 directory", realCgroupRoot, err)
	}
	dev, uuid := firstNonMIG(t, lib)
	cg := fmt.Sprintf("/gpud-memlimit-test-%d", os.Getpid())
	ns := filepath.Join(realCgroupRoot, cg)
	if err := os.Mkdir(ns, 0o755); err != nil {
		t.Skipf("cannot make a test cgroup (run as root): %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(ns) })
	if _, ret := dev.GetMemoryLimits_v1(ns); errors.Is(ret, nvml.ERROR_FUNCTION_NOT_FOUND) {
		t.Skipf("driver %s: this NVML lacks nvmlDeviceGetMemoryLimits_v1: %v", version, ret)
	}

	m, err := New(Config{CgroupRoot: realCgroupRoot, DriverVersion: version, Devices: []Device{dev}})
	if err != nil {
		t.Fatal(err)
	}
	d := m.Decisions()[0]
	t.Logf("GPU %d %s: mode %s (%s)", d.Index, uuid, d.Mode, d.Reason)
	if d.Mode != ModeDriver {
		t.Fatalf("an r615 driver (%s) on cgroup v2, GPU out of MIG mode: mode %s (%s), want driver", version, d.Mode, d.Reason)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		t.Fatalf("GetMemoryInfo: %v", ret)
	}
	const gib = uint64(1) << 30
	if _, err := m.Set(cg, []Fraction{{GPUUUID: uuid, RequestBytes: gib, LimitBytes: 2 * gib}}); err != nil {
		t.Fatalf("Set: %v", err)
	}
	l, ret := dev.GetMemoryLimits_v1(ns)
	if ret != nvml.SUCCESS || l.SoftLimit != gib || l.HardLimit != 2*gib || l.CurrentUsed != 0 {
		t.Errorf("GetMemoryLimits_v1 after Set = %+v, %v; want soft 1 GiB, hard 2 GiB, nothing used", l, ret)
	}
	if s := m.Sample(map[string][]string{uuid: {cg}}); len(s) != 1 || s[0].Cgroups[cg] != (CgroupUse{SoftBytes: gib}) {
		t.Errorf("Sample = %+v, want the cgroup using 0 of its 1 GiB soft limit", s)
	}
	if ret := dev.SetMemoryLimits_v1(ns, 2*gib, gib); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("soft above hard: %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if ret := dev.SetMemoryLimits_v1(ns, 0, mem.Total+gib); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("hard above the GPU's %d bytes: %v, want ERROR_INVALID_ARGUMENT", mem.Total, ret)
	}
	if err := m.Clear(cg, []string{uuid}); err != nil {
		t.Fatalf("Clear: %v", err)
	}
	switch l, ret := dev.GetMemoryLimits_v1(ns); {
	case ret == nvml.ERROR_NOT_FOUND:
	case ret == nvml.SUCCESS && l.SoftLimit == 0 && l.HardLimit == nvml.DEVICE_MEMORY_LIMIT_MAX:
		t.Logf("a cleared cgroup reads as soft 0, hard MAX (the simulated node answers ERROR_NOT_FOUND)")
	default:
		t.Errorf("after Clear: %+v, %v; want no limit", l, ret)
	}
	if err := os.Remove(ns); err != nil {
		t.Fatal(err)
	}
	if _, ret := dev.GetMemoryLimits_v1(ns); ret != nvml.ERROR_OPERATING_SYSTEM {
		t.Errorf("a removed cgroup: %v, want ERROR_OPERATING_SYSTEM (the path cannot be opened)", ret)
	}
}

// firstNonMIG is the first GPU not in MIG mode, or skips.
func firstNonMIG(t *testing.T, lib nvml.Interface) (nvml.Device, string) {
	t.Helper()
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetCount: %v", ret)
	}
	for i := range count {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatalf("GPU %d: %v", i, ret)
		}
		if cur, _, ret := dev.GetMigMode(); ret == nvml.SUCCESS && cur == nvml.DEVICE_MIG_ENABLE {
			continue
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			t.Fatalf("GPU %d UUID: %v", i, ret)
		}
		return dev, uuid
	}
	t.Skipf("all %d GPUs are in MIG mode: the driver has no per-cgroup limits there", count)
	return nil, ""
}
