package simnode

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

const (
	gib     = uint64(1) << 30
	r615    = "615.40.01"
	noLimit = nvml.DEVICE_MEMORY_LIMIT_MAX
)

// cgroupDir makes a cgroup-like directory under a temp root, as the
// cgroup mount has one per pod and container.
func cgroupDir(t *testing.T, root string, parts ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{root}, parts...)...)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMemoryLimitsUnsupported(t *testing.T) {
	cg := cgroupDir(t, t.TempDir(), "kubepods", "pod-a", "c1")
	migOn := func(t *testing.T, n *Node) nvml.Device { return enableMIG(t, n, 0) }
	migHandle := func(t *testing.T, n *Node) nvml.Device {
		d := enableMIG(t, n, 0)
		gi, ret := d.CreateGpuInstance(profile(t, d, nvml.GPU_INSTANCE_PROFILE_7_SLICE))
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		ci, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		h, ret := d.GetMigDeviceHandleByIndex(0)
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		return h
	}
	tests := []struct {
		name   string
		node   string
		driver string // "" keeps the profile's (550.54.15)
		handle func(t *testing.T, n *Node) nvml.Device
		want   nvml.Return
	}{
		{name: "r550 driver", node: "dgx-h100", want: nvml.ERROR_NOT_SUPPORTED},
		{name: "r610 driver", node: "dgx-h100", driver: "610.10", want: nvml.ERROR_NOT_SUPPORTED},
		{name: "r615 GPU in MIG mode", node: "dgx-h100", driver: r615, handle: migOn, want: nvml.ERROR_NOT_SUPPORTED},
		{name: "r615 MIG device", node: "dgx-h100", driver: r615, handle: migHandle, want: nvml.ERROR_NOT_SUPPORTED},
		{name: "r615 A100 in MIG mode after reset", node: "dgx-a100", driver: r615, handle: migOn, want: nvml.ERROR_NOT_SUPPORTED},
		{name: "r615 H100", node: "dgx-h100", driver: r615, want: nvml.ERROR_NOT_FOUND},
		{name: "r615 L40S (no MIG)", node: "pcie-l40s", driver: r615, want: nvml.ERROR_NOT_FOUND},
		{name: "r620 H200", node: "dgx-h200", driver: "620.1.2", want: nvml.ERROR_NOT_FOUND},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts []Option
			if tc.driver != "" {
				opts = append(opts, WithDriverVersion(tc.driver))
			}
			n := NewBuiltin(tc.node, opts...)
			t.Cleanup(n.Close)
			d, _ := n.DeviceGetHandleByIndex(0)
			if tc.handle != nil {
				d = tc.handle(t, n)
			}
			// Get is the probe: NOT_FOUND (no limits yet) means the
			// driver has the call for this device.
			if _, ret := n.DeviceGetMemoryLimits_v1(d, cg); ret != tc.want {
				t.Errorf("GetMemoryLimits_v1 = %v, want %v", ret, tc.want)
			}
			wantSet := nvml.SUCCESS
			if tc.want == nvml.ERROR_NOT_SUPPORTED {
				wantSet = nvml.ERROR_NOT_SUPPORTED
			}
			if ret := n.DeviceSetMemoryLimits_v1(d, cg, gib, 2*gib); ret != wantSet {
				t.Errorf("SetMemoryLimits_v1 = %v, want %v", ret, wantSet)
			}
		})
	}
}

func TestDriverVersionMustHaveABranch(t *testing.T) {
	for _, v := range []string{"abc", ".1", "-3.1", "r615"} {
		if _, err := New(builtins["dgx-h100"], WithDriverVersion(v)); !errors.Is(err, ErrBadProfile) || !strings.Contains(err.Error(), v) {
			t.Errorf("New with driver %q = %v, want ErrBadProfile naming it", v, err)
		}
	}
	n := NewBuiltin("dgx-h100", WithDriverVersion(r615))
	if v, _ := n.SystemGetDriverVersion(); v != r615 {
		t.Errorf("SystemGetDriverVersion = %q, want %q", v, r615)
	}
}

func TestMemoryLimitsSetAndGet(t *testing.T) {
	root := t.TempDir()
	cg := cgroupDir(t, root, "kubepods", "pod-a", "c1")
	n := NewBuiltin("dgx-h100", WithDriverVersion(r615))
	t.Cleanup(n.Close)
	d, _ := n.DeviceGetHandleByIndex(2)
	total := n.model.config.MemoryMB << 20
	tests := []struct {
		name       string
		ns         string
		soft, hard uint64
		want       nvml.Return
	}{
		{name: "empty namespace", ns: "", soft: gib, hard: gib, want: nvml.ERROR_INVALID_ARGUMENT},
		{name: "relative namespace", ns: "kubepods/pod-a/c1", soft: gib, hard: gib, want: nvml.ERROR_INVALID_ARGUMENT},
		{name: "soft above hard", ns: cg, soft: 2 * gib, hard: gib, want: nvml.ERROR_INVALID_ARGUMENT},
		{name: "hard above the GPU", ns: cg, soft: gib, hard: total + 1, want: nvml.ERROR_INVALID_ARGUMENT},
		{name: "soft above the GPU, no hard limit", ns: cg, soft: total + 1, hard: noLimit, want: nvml.ERROR_INVALID_ARGUMENT},
		{name: "no such cgroup", ns: filepath.Join(root, "gone"), soft: gib, hard: gib, want: nvml.ERROR_OPERATING_SYSTEM},
		{name: "whole GPU", ns: cg, soft: total, hard: total, want: nvml.SUCCESS},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if ret := d.SetMemoryLimits_v1(tc.ns, tc.soft, tc.hard); ret != tc.want {
				t.Errorf("SetMemoryLimits_v1(%q, %d, %d) = %v, want %v", tc.ns, tc.soft, tc.hard, ret, tc.want)
			}
		})
	}
	if _, ret := d.GetMemoryLimits_v1(""); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("Get with an empty namespace = %v, want ERROR_INVALID_ARGUMENT", ret)
	}

	get := func(ns string) (nvml.MemoryLimits_v1, nvml.Return) { return n.DeviceGetMemoryLimits_v1(d, ns) }
	if ret := n.DeviceSetMemoryLimits_v1(d, cg, 10*gib, 12*gib); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if l, ret := get(cg); ret != nvml.SUCCESS || l != (nvml.MemoryLimits_v1{NameSpace: cg, SoftLimit: 10 * gib, HardLimit: 12 * gib}) {
		t.Errorf("Get = %+v, %v; want soft 10 GiB, hard 12 GiB", l, ret)
	}
	other, _ := n.DeviceGetHandleByIndex(3)
	if _, ret := other.GetMemoryLimits_v1(cg); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("another GPU's limits for the cgroup: %v, want ERROR_NOT_FOUND (limits are per GPU)", ret)
	}
	// A soft limit alone; then clearing (soft 0, hard MAX) removes them.
	if ret := d.SetMemoryLimits_v1(cg, 5*gib, noLimit); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if l, _ := get(cg); l.SoftLimit != 5*gib || l.HardLimit != noLimit {
		t.Errorf("soft only: %+v", l)
	}
	if ret := d.SetMemoryLimits_v1(cg, 0, noLimit); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if l, ret := get(cg); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("after clearing: %+v, %v; want ERROR_NOT_FOUND", l, ret)
	}
	// Removing the cgroup removes its limits: a new cgroup at that path
	// starts with none.
	if ret := d.SetMemoryLimits_v1(cg, gib, gib); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if err := os.Remove(cg); err != nil {
		t.Fatal(err)
	}
	if _, ret := get(cg); ret != nvml.ERROR_OPERATING_SYSTEM {
		t.Errorf("Get of a removed cgroup = %v, want ERROR_OPERATING_SYSTEM", ret)
	}
	cgroupDir(t, cg)
	if _, ret := get(cg); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("Get of a new cgroup at the old path = %v, want ERROR_NOT_FOUND", ret)
	}
	if ret := n.DeviceSetMemoryLimits_v1(nil, cg, gib, gib); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("Set on a nil device = %v", ret)
	}
	n.InjectFault("SetMemoryLimits_v1", FaultSpec{Return: nvml.ERROR_NO_PERMISSION})
	if ret := d.SetMemoryLimits_v1(cg, gib, gib); ret != nvml.ERROR_NO_PERMISSION {
		t.Errorf("with an injected fault: %v, want ERROR_NO_PERMISSION", ret)
	}
}

// TestHardLimitFailsAllocation: a process whose cgroup (or a cgroup above
// it) is at its hard limit gets the driver's out-of-memory error and keeps
// what it had; its neighbour on the same GPU keeps allocating; the process
// environment does not lift the limit.
func TestHardLimitFailsAllocation(t *testing.T) {
	root := t.TempDir()
	podA := cgroupDir(t, root, "kubepods", "pod-a")
	ctrA := cgroupDir(t, podA, "c1")
	ctrA2 := cgroupDir(t, podA, "c2")
	ctrB := cgroupDir(t, root, "kubepods", "pod-b", "c1")
	n := NewBuiltin("dgx-h100", WithDriverVersion(r615))
	t.Cleanup(n.Close)
	d, _ := n.DeviceGetHandleByIndex(0)
	if ret := d.SetMemoryLimits_v1(ctrA, 8*gib, 10*gib); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	wantOOM := func(t *testing.T, err error, cgroup string) {
		t.Helper()
		if !errors.Is(err, nvml.ERROR_MEMORY) || !strings.Contains(err.Error(), cgroup) {
			t.Fatalf("err = %v, want ERROR_MEMORY naming cgroup %s", err, cgroup)
		}
	}
	used := func(pid uint32) uint64 {
		for _, p := range d.(*Device).processes(-1) {
			if p.Pid == pid {
				return p.UsedGpuMemory
			}
		}
		return 0
	}
	// The environment asks for 40 GiB; the cgroup's 10 GiB still holds.
	env := map[string]string{EnvMPSPinnedDeviceMemLimit: "0=40G"}
	if err := n.StartProcess(0, ProcessSpec{PID: 100, MemoryBytes: 4 * gib, Cgroup: ctrA, Env: env}); err != nil {
		t.Fatal(err)
	}
	if err := n.StartProcess(0, ProcessSpec{PID: 200, MemoryBytes: 12 * gib, Cgroup: ctrB}); err != nil {
		t.Fatalf("neighbour without limits: %v", err)
	}
	wantOOM(t, n.Allocate(100, 8*gib), ctrA)
	if got := used(100); got != 4*gib {
		t.Errorf("after a failed allocation pid 100 holds %d, want 4 GiB", got)
	}
	if err := n.Allocate(100, 6*gib); err != nil {
		t.Fatalf("up to the hard limit exactly: %v", err)
	}
	wantOOM(t, n.Allocate(100, 1), ctrA)
	wantOOM(t, n.StartProcess(0, ProcessSpec{PID: 101, MemoryBytes: gib, Cgroup: ctrA}), ctrA)
	if err := n.Allocate(200, 20*gib); err != nil {
		t.Errorf("neighbour after pid 100 hit its limit: %v", err)
	}
	if l, _ := d.GetMemoryLimits_v1(ctrA); l.CurrentUsed != 10*gib {
		t.Errorf("CurrentUsed = %d, want 10 GiB", l.CurrentUsed)
	}

	// A limit on the pod's cgroup holds its containers together.
	if ret := d.SetMemoryLimits_v1(podA, 0, 11*gib); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if err := n.StartProcess(0, ProcessSpec{PID: 102, MemoryBytes: gib, Cgroup: ctrA2}); err != nil {
		t.Fatalf("a second container of the pod, within the pod's limit: %v", err)
	}
	wantOOM(t, n.Allocate(102, 1), podA)
	if l, _ := d.GetMemoryLimits_v1(podA); l.CurrentUsed != 11*gib {
		t.Errorf("pod CurrentUsed = %d, want 11 GiB", l.CurrentUsed)
	}

	// Raising the limit lets it grow; lowering it below use takes nothing
	// back but fails the next allocation; hard 0 allows nothing.
	if ret := d.SetMemoryLimits_v1(podA, 0, noLimit); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := d.SetMemoryLimits_v1(ctrA, 8*gib, 16*gib); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if err := n.Allocate(100, 6*gib); err != nil {
		t.Errorf("after raising the hard limit to 16 GiB: %v", err)
	}
	if ret := d.SetMemoryLimits_v1(ctrA, 0, 2*gib); ret != nvml.SUCCESS {
		t.Fatalf("lowering below use = %v", ret)
	}
	if got := used(100); got != 16*gib {
		t.Errorf("pid 100 holds %d after the limit went down, want 16 GiB", got)
	}
	wantOOM(t, n.Allocate(100, 1), ctrA)
	if ret := d.SetMemoryLimits_v1(ctrA2, 0, 0); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	wantOOM(t, n.StartProcess(0, ProcessSpec{PID: 103, MemoryBytes: 1, Cgroup: ctrA2}), ctrA2)

	// Clearing the limit, and a process in no cgroup, are unlimited.
	if ret := d.SetMemoryLimits_v1(ctrA, 0, noLimit); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if err := n.Allocate(100, gib); err != nil {
		t.Errorf("after clearing: %v", err)
	}
	if err := n.AddProcess(0, 300, gib); err != nil {
		t.Errorf("a process without a cgroup: %v", err)
	}
	// Limits are per GPU: the cgroup's limit on GPU 0 does not apply on 1.
	if err := n.StartProcess(1, ProcessSpec{PID: 104, MemoryBytes: 30 * gib, Cgroup: ctrA2}); err != nil {
		t.Errorf("the cgroup on another GPU: %v", err)
	}
}

func TestMemoryLimitsSurviveRestart(t *testing.T) {
	root := t.TempDir()
	cgA := cgroupDir(t, root, "a")
	cgB := cgroupDir(t, root, "b")
	state := filepath.Join(t.TempDir(), "state.json")
	n, err := New(builtins["dgx-h100"], WithStateFile(state), WithDriverVersion(r615))
	if err != nil {
		t.Fatal(err)
	}
	d0, _ := n.DeviceGetHandleByIndex(0)
	d5, _ := n.DeviceGetHandleByIndex(5)
	if ret := d0.SetMemoryLimits_v1(cgA, 10*gib, 12*gib); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := d5.SetMemoryLimits_v1(cgB, 3*gib, noLimit); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if err := n.StateErr(); err != nil {
		t.Fatal(err)
	}
	n.Close()

	n2, err := New(builtins["dgx-h100"], WithStateFile(state), WithDriverVersion(r615))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n2.Close)
	d0, _ = n2.DeviceGetHandleByIndex(0)
	d5, _ = n2.DeviceGetHandleByIndex(5)
	if l, ret := d0.GetMemoryLimits_v1(cgA); ret != nvml.SUCCESS || l.SoftLimit != 10*gib || l.HardLimit != 12*gib {
		t.Errorf("gpu 0 after restart: %+v, %v", l, ret)
	}
	if l, ret := d5.GetMemoryLimits_v1(cgB); ret != nvml.SUCCESS || l.SoftLimit != 3*gib || l.HardLimit != noLimit {
		t.Errorf("gpu 5 after restart: %+v, %v", l, ret)
	}
	if err := n2.StartProcess(0, ProcessSpec{PID: 1, MemoryBytes: 13 * gib, Cgroup: cgA}); !errors.Is(err, nvml.ERROR_MEMORY) {
		t.Errorf("allocation past the restored hard limit: %v, want ERROR_MEMORY", err)
	}

	// A file with limits the driver would refuse is refused, naming it.
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(data), `"softBytes": 10737418240`, `"softBytes": 20737418240`, 1)
	if bad == string(data) {
		t.Fatalf("state file has no soft limit to damage:\n%s", data)
	}
	if err := os.WriteFile(state, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(builtins["dgx-h100"], WithStateFile(state)); err == nil || !strings.Contains(err.Error(), state) || !strings.Contains(err.Error(), cgA) {
		t.Errorf("New with soft above hard in the state file = %v, want an error naming the file and the cgroup", err)
	}
}
