package enforce

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/internal/testkit/cgrouptest"
	"github.com/gpud/gpud/pkg/cgroupfs"
	"github.com/gpud/gpud/pkg/cpuaffinity"
	"github.com/gpud/gpud/pkg/devcgroup"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/usage"
)

func mounts(t *testing.T) cgroupfs.Mounts {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates cgroups, mknods devices, loads BPF programs")
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no mountinfo: %v", err)
	}
	defer f.Close()
	m, err := cgroupfs.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestEnforcerKernel runs the enforcer on a kubepods-like tree in the real
// cgroup2 hierarchy: a GPU container gets exactly its GPUs within a
// second of its cgroup appearing, a container of a pod without GPUs gets
// none, and the filter goes when the cgroup does.
func TestEnforcerKernel(t *testing.T) {
	m := mounts(t)
	if m.Unified == "" {
		t.Skip("no cgroup2 mount")
	}
	if err := devcgroup.Probe(); err != nil {
		t.Skipf("kernel: %v", err)
	}
	root := filepath.Join(m.Unified, fmt.Sprintf("gpud-enforce-test-%d", os.Getpid()))
	cgrouptest.MkTree(t, root)
	devs := t.TempDir()
	nodes := cgrouptest.GPUNodes(t, devs, 8)
	inv := dgxH100(t)
	allocs := &fakeAllocs{as: []usage.Assignment{
		{Namespace: "ml", Pod: "train", Container: "cuda", ResourceName: "nvidia.com/gpu", DeviceIDs: []string{inv.GPUs[1].UUID, inv.GPUs[3].UUID}},
	}}
	pods := fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}, uidB: {Namespace: "web", Name: "nginx", UID: uidB}}
	names := fakeContainers{cid('a'): {"ml", "train", "cuda"}, cid('b'): {"web", "nginx", "nginx"}}
	e, err := New(Config{Unified: root, Isolate: true, Interval: 200 * time.Millisecond,
		Inventory: func() gpu.Inventory { return inv }, Allocations: allocs, Pods: pods, Containers: names},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	podA := filepath.Join(root, "kubepods", "burstable", "pod"+uidA)
	podB := filepath.Join(root, "kubepods", "besteffort", "pod"+uidB)
	for _, d := range []string{filepath.Join(root, "kubepods"), filepath.Dir(podA), podA, filepath.Dir(podB), podB} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctrA := filepath.Join(podA, cid('a'))
	ctrB := filepath.Join(podB, cid('b'))
	start := time.Now()
	for _, d := range []string{ctrA, ctrB} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Poll from inside the container until the filter is there. A child
	// may take long to start and exit (the race detector, a loaded
	// machine), so what counts is when it was started: one started more
	// than MaxInterval after the cgroup appeared must be filtered.
	var got map[string]string
	for {
		t0 := time.Now()
		got = cgrouptest.OpenIn(t, ctrA, nodes)
		if got["nvidia0"] == "EPERM" {
			t.Logf("gpu container filtered for a process started %s after its cgroup appeared: %v", t0.Sub(start).Round(time.Millisecond), got)
			break
		}
		if t0.Sub(start) > MaxInterval {
			t.Fatalf("no filter on %s for a process started %s after its cgroup appeared: %v", ctrA, t0.Sub(start), got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 8 {
		n := fmt.Sprintf("nvidia%d", i)
		want := "EPERM"
		if i == inv.GPUs[1].Minor || i == inv.GPUs[3].Minor {
			want = "ENXIO"
		}
		if got[n] != want && !(want == "ENXIO" && got[n] == "ENODEV") {
			t.Errorf("gpu container: open %s = %s, want %s", n, got[n], want)
		}
	}
	// Container b's filter may land a moment after a's (the enforcer
	// handles one cgroup at a time): the same deadline holds for it.
	for {
		t0 := time.Now()
		gotB := cgrouptest.OpenIn(t, ctrB, nodes)
		allDenied := true
		for _, res := range gotB {
			allDenied = allDenied && res == "EPERM"
		}
		if allDenied {
			break
		}
		if t0.Sub(start) > MaxInterval {
			for n, res := range gotB {
				if res != "EPERM" {
					t.Errorf("container without gpus, process started %s after its cgroup appeared: open %s = %s, want EPERM", t0.Sub(start), n, res)
				}
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The allocation changes (a device moved by the kubelet): the filter follows.
	e.mu.Lock()
	allocs.as = []usage.Assignment{{Namespace: "ml", Pod: "train", Container: "cuda", ResourceName: "nvidia.com/gpu", DeviceIDs: []string{inv.GPUs[0].UUID}}}
	e.mu.Unlock()
	changed := time.Now()
	for {
		t0 := time.Now()
		if cgrouptest.OpenIn(t, ctrA, nodes)["nvidia0"] != "EPERM" {
			break
		}
		if t0.Sub(changed) > 2*MaxInterval {
			t.Fatal("filter did not follow the allocation change")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The container ends: its cgroup goes and the enforcer lets go.
	if err := os.Remove(ctrB); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * MaxInterval)
	for {
		e.mu.Lock()
		_, held := e.tracked["/kubepods/besteffort/pod"+uidB+"/"+cid('b')]
		e.mu.Unlock()
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("enforcer still holds the filter of a removed cgroup")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s := e.Status(); !strings.Contains(s, "ebpf on") {
		t.Errorf("Status() = %q, want ebpf on", s)
	}
	// Run ends: every filter is detached.
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil
	if got := cgrouptest.OpenIn(t, ctrA, nodes); got["nvidia5"] == "EPERM" {
		t.Errorf("after Run ended: open nvidia5 = EPERM, want the filter detached")
	}
}

// TestEnforcerCPUAffinity aligns a GPU container's cpuset on the real
// cpuset hierarchy (cgroup2 with cpuset, else v1).
func TestEnforcerCPUAffinity(t *testing.T) {
	m := mounts(t)
	var w *cpuaffinity.Writer
	var root string
	probe, err := cpuaffinity.NewWriter(m.Unified, m.V1["cpuset"])
	if err != nil {
		t.Skipf("%v", err)
	}
	base := fmt.Sprintf("gpud-enforce-cpu-test-%d", os.Getpid())
	v1 := probe.Hierarchy() != m.Unified
	if v1 {
		// containerd/cgroups wants a v1 hierarchy named "cpuset".
		cgrouptest.MkTree(t, filepath.Join(probe.Hierarchy(), base))
		fillCpuset(t, filepath.Join(probe.Hierarchy(), base))
		root = filepath.Join(probe.Hierarchy(), base, "cpuset")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		fillCpuset(t, root)
		if w, err = cpuaffinity.NewWriter("", root); err != nil {
			t.Fatal(err)
		}
	} else {
		root = filepath.Join(m.Unified, base)
		cgrouptest.MkTree(t, root)
		if w, err = cpuaffinity.NewWriter(root, ""); err != nil {
			t.Skipf("%v", err)
		}
	}
	online, err := w.Get("/")
	if err != nil || len(online) < 2 {
		t.Skipf("needs 2+ CPUs in the test cgroup (%v, %v)", online, err)
	}
	rel := "/kubepods/burstable/pod" + uidA + "/" + cid('a')
	parts := strings.Split(strings.Trim(rel, "/"), "/")
	for i := range parts {
		d := filepath.Join(root, filepath.Join(parts[:i+1]...))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if v1 {
			fillCpuset(t, d)
		}
	}
	// The CPU request as the kubelet writes it (cpu.shares for 500m), in a
	// stand-in of the cpu hierarchy.
	cpuRoot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cpuRoot, rel), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cpuRoot, rel, "cpu.shares"), []byte("512"), 0o644); err != nil {
		t.Fatal(err)
	}
	last := online[len(online)-1]
	inv := gpu.Inventory{GPUs: []gpu.GPU{{UUID: "GPU-near", Minor: 0, CPUAffinity: []int{last}}, {UUID: "GPU-far", Minor: 1, CPUAffinity: online[:1]}}}
	e, err := New(Config{CPUs: w, CPURoot: cpuRoot, OnlineCPUs: online,
		Inventory:   func() gpu.Inventory { return inv },
		Allocations: &fakeAllocs{as: []usage.Assignment{{Namespace: "ml", Pod: "train", Container: "cuda", DeviceIDs: []string{"GPU-near"}}}},
		Pods:        fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}},
		Containers:  fakeContainers{cid('a'): {"ml", "train", "cuda"}}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e.Reconcile(t.Context())
	got, err := w.Get(rel)
	if err != nil {
		t.Fatal(err)
	}
	if cpuaffinity.Format(got) != fmt.Sprint(last) {
		t.Errorf("cpuset.cpus = %s, want %d (GPU-near's CPU)", cpuaffinity.Format(got), last)
	}
	t.Logf("%s: cpuset.cpus %s -> %s", filepath.Join(root, rel), cpuaffinity.Format(online), cpuaffinity.Format(got))
}

// fillCpuset gives a new v1 cpuset cgroup its parent's CPUs and memory
// nodes, as a runtime does (v1 cpusets start empty).
func fillCpuset(t *testing.T, d string) {
	t.Helper()
	for _, n := range []string{"cpuset.mems", "cpuset.cpus"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(d), n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, n), b, 0); err != nil {
			t.Fatal(err)
		}
	}
}
