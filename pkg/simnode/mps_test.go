package simnode

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestComputeModePersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	n, err := New(builtins["dgx-h100"], WithStateFile(path))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := n.DeviceGetHandleByIndex(2)
	if mode, ret := d.GetComputeMode(); ret != nvml.SUCCESS || mode != nvml.COMPUTEMODE_DEFAULT {
		t.Fatalf("GetComputeMode of a new GPU = %v, %v; want DEFAULT", mode, ret)
	}
	for _, tc := range []struct {
		mode nvml.ComputeMode
		want nvml.Return
	}{
		{nvml.COMPUTEMODE_EXCLUSIVE_THREAD, nvml.ERROR_NOT_SUPPORTED},
		{nvml.COMPUTEMODE_COUNT, nvml.ERROR_INVALID_ARGUMENT},
		{nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, nvml.SUCCESS},
	} {
		if ret := d.SetComputeMode(tc.mode); ret != tc.want {
			t.Errorf("SetComputeMode(%d) = %v, want %v", tc.mode, ret, tc.want)
		}
	}
	if err := n.StateErr(); err != nil {
		t.Fatal(err)
	}
	again, err := New(builtins["dgx-h100"], WithStateFile(path))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range map[int]nvml.ComputeMode{2: nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, 0: nvml.COMPUTEMODE_DEFAULT} {
		d, _ := again.DeviceGetHandleByIndex(i)
		if mode, ret := d.GetComputeMode(); ret != nvml.SUCCESS || mode != want {
			t.Errorf("after a restart gpu %d compute mode = %v, %v; want %v", i, mode, ret, want)
		}
	}

	n.InjectFault("SetComputeMode", FaultSpec{Return: nvml.ERROR_NO_PERMISSION})
	if ret := d.SetComputeMode(nvml.COMPUTEMODE_DEFAULT); ret != nvml.ERROR_NO_PERMISSION {
		t.Errorf("SetComputeMode with an injected fault = %v, want ERROR_NO_PERMISSION", ret)
	}
}

// listenMPS stands a control socket up in a fresh pipe directory, as a
// running control daemon has.
func listenMPS(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mps") // short: a unix socket lives here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, mpsControlSocket))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return dir
}

func TestMPSClientLimits(t *testing.T) {
	const mib = 1 << 20
	pipe := listenMPS(t)
	n := NewBuiltin("dgx-h100")
	d, _ := n.DeviceGetHandleByIndex(0)
	if ret := d.SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	client := func(pid uint32, env map[string]string) ProcessSpec {
		env[EnvMPSPipeDirectory] = pipe
		return ProcessSpec{PID: pid, MemoryBytes: 100 * mib, Env: env}
	}
	// Two clients of the daemon share the exclusive GPU, each in its limits.
	if err := n.StartProcess(0, client(10, map[string]string{EnvMPSPinnedDeviceMemLimit: "0=1024M", EnvMPSActiveThreadPercentage: "25"})); err != nil {
		t.Fatal(err)
	}
	if err := n.StartProcess(0, client(11, map[string]string{EnvMPSPinnedDeviceMemLimit: "1=1G,0=2G"})); err != nil {
		t.Fatal(err)
	}
	if l, _ := n.Limits(10); !l.MPS || l.PinnedMemoryBytes != 1024*mib || l.ActiveThreadPercent != 25 || l.SMs != 33 {
		t.Errorf("limits of pid 10 = %+v, want MPS, 1 GiB, 25%% = 33 of 132 SMs", l)
	}
	if l, _ := n.Limits(11); l.PinnedMemoryBytes != 2<<30 || l.SMs != 132 {
		t.Errorf("limits of pid 11 = %+v, want its ordinal 0's 2 GiB and every SM", l)
	}
	// Up to the limit passes; one byte above fails as cudaMalloc does.
	if err := n.Allocate(10, 924*mib); err != nil {
		t.Fatalf("allocating up to the pinned limit: %v", err)
	}
	err := n.Allocate(10, 1)
	if !errors.Is(err, nvml.ERROR_MEMORY) || !strings.Contains(err.Error(), "pinned MPS limit") {
		t.Fatalf("allocating above the pinned limit = %v, want ERROR_MEMORY naming the limit", err)
	}
	if used := n.processMem(0, 10); used != 1024*mib {
		t.Errorf("pid 10 holds %d bytes after the refused allocation, want 1 GiB", used)
	}
	// A start above the limit fails too.
	if err := n.StartProcess(0, ProcessSpec{PID: 12, MemoryBytes: 2 << 30, Env: map[string]string{EnvMPSPipeDirectory: pipe, EnvMPSPinnedDeviceMemLimit: "0=1G"}}); !errors.Is(err, nvml.ERROR_MEMORY) {
		t.Errorf("start above the pinned limit = %v, want ERROR_MEMORY", err)
	}
	// A process outside MPS cannot use the exclusive GPU the daemon holds.
	if err := n.AddProcess(0, 13, mib); !errors.Is(err, nvml.ERROR_IN_USE) {
		t.Errorf("a plain process on the exclusive GPU = %v, want ERROR_IN_USE", err)
	}
}

func TestProcessWithoutDaemonIsPlain(t *testing.T) {
	const gib = 1 << 30
	n := NewBuiltin("dgx-h100")
	// The pipe directory has no daemon: CUDA runs without MPS, unlimited.
	env := map[string]string{EnvMPSPipeDirectory: t.TempDir(), EnvMPSPinnedDeviceMemLimit: "0=1G"}
	if err := n.StartProcess(1, ProcessSpec{PID: 20, MemoryBytes: 2 * gib, Env: env}); err != nil {
		t.Fatalf("a process whose daemon is gone: %v", err)
	}
	if l, _ := n.Limits(20); l.MPS || l.PinnedMemoryBytes != 0 {
		t.Errorf("limits = %+v, want a plain process", l)
	}
	if err := n.Allocate(20, gib); err != nil {
		t.Errorf("allocate in a plain process: %v", err)
	}
	d, _ := n.DeviceGetHandleByIndex(1)
	if ret := d.SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if err := n.AddProcess(1, 21, gib); !errors.Is(err, nvml.ERROR_IN_USE) {
		t.Errorf("a second process on an exclusive-process GPU = %v, want ERROR_IN_USE", err)
	}
	if err := n.Allocate(20, 200*gib); !errors.Is(err, nvml.ERROR_MEMORY) {
		t.Errorf("allocate above the GPU's free memory = %v, want ERROR_MEMORY", err)
	}
	if err := n.Allocate(99, 1); err == nil {
		t.Error("allocate in a process that does not exist succeeded")
	}
}

func TestMPSEnvErrors(t *testing.T) {
	pipe := listenMPS(t)
	tests := []struct {
		name, key, value string
	}{
		{"percentage zero", EnvMPSActiveThreadPercentage, "0"},
		{"percentage above 100", EnvMPSActiveThreadPercentage, "150"},
		{"limit without ordinal", EnvMPSPinnedDeviceMemLimit, "1G"},
		{"limit not a size", EnvMPSPinnedDeviceMemLimit, "0=lots"},
		{"ordinal not a number", EnvMPSPinnedDeviceMemLimit, "x=1G"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := NewBuiltin("dgx-h100")
			err := n.StartProcess(0, ProcessSpec{PID: 1, Env: map[string]string{EnvMPSPipeDirectory: pipe, tc.key: tc.value}})
			if !errors.Is(err, nvml.ERROR_INVALID_ARGUMENT) || !strings.Contains(err.Error(), tc.key) {
				t.Errorf("StartProcess with %s=%s = %v, want ERROR_INVALID_ARGUMENT naming it", tc.key, tc.value, err)
			}
		})
	}
}

// processMem is what pid holds on gpu index.
func (n *Node) processMem(index int, pid uint32) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.devices[index].procs[pid].memBytes
}
