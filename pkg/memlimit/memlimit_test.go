package memlimit

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/simnode"
)

const gib = uint64(1) << 30

func TestDecide(t *testing.T) {
	tests := []struct {
		name       string
		facts      Facts
		want       Mode
		wantReason string
	}{
		{name: "r615, cgroup v2, no limits yet", facts: Facts{DriverVersion: "615.40.01", CgroupV2: true, Probe: nvml.ERROR_NOT_FOUND, MPS: true},
			want: ModeDriver, wantReason: "driver 615.40.01 limits GPU memory per cgroup"},
		{name: "r615, limits already there", facts: Facts{DriverVersion: "615.40.01", CgroupV2: true, Probe: nvml.SUCCESS},
			want: ModeDriver},
		{name: "r550 with MPS", facts: Facts{DriverVersion: "550.54.15", CgroupV2: true, Probe: nvml.ERROR_NOT_SUPPORTED, MPS: true},
			want: ModeMPS, wantReason: "driver 550.54.15 predates r615"},
		{name: "r550, library without the call", facts: Facts{DriverVersion: "550.54.15", CgroupV2: true, Probe: nvml.ERROR_FUNCTION_NOT_FOUND},
			want: ModeWatchdog, wantReason: "driver 550.54.15 predates r615"},
		{name: "MIG mode", facts: Facts{DriverVersion: "615.40.01", CgroupV2: true, MIG: true, Probe: nvml.ERROR_NOT_SUPPORTED, MPS: true},
			want: ModeMPS, wantReason: "MIG mode on"},
		{name: "cgroup v1", facts: Facts{DriverVersion: "615.40.01", MPS: true},
			want: ModeMPS, wantReason: "no cgroup v2"},
		{name: "r615 refusing the GPU", facts: Facts{DriverVersion: "615.40.01", CgroupV2: true, Probe: nvml.ERROR_NOT_SUPPORTED},
			want: ModeWatchdog, wantReason: "GetMemoryLimits_v1: " + nvml.ERROR_NOT_SUPPORTED.Error()},
		{name: "cgroup mount not openable", facts: Facts{DriverVersion: "615.40.01", CgroupV2: true, Probe: nvml.ERROR_OPERATING_SYSTEM, MPS: true},
			want: ModeMPS, wantReason: nvml.ERROR_OPERATING_SYSTEM.Error()},
		{name: "r615 turned off, MPS", facts: Facts{DriverVersion: "615.40.01", CgroupV2: true, Probe: nvml.ERROR_NOT_FOUND, MPS: true, Off: true},
			want: ModeMPS, wantReason: "turned off by --memory-limits=off"},
		{name: "r615 turned off", facts: Facts{DriverVersion: "615.40.01", CgroupV2: true, Probe: nvml.ERROR_NOT_FOUND, Off: true},
			want: ModeWatchdog, wantReason: "turned off by --memory-limits=off"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.facts)
			if d.Mode != tc.want || !strings.Contains(d.Reason, tc.wantReason) {
				t.Errorf("Decide = %s (%s), want %s with reason containing %q", d.Mode, d.Reason, tc.want, tc.wantReason)
			}
		})
	}
}

// simNode is a simulated node with driver, its GPUs' handles and a cgroup2
// mount in a temp dir; migGPUs are put in MIG mode.
func simNode(t *testing.T, profile, driver string, migGPUs ...int) (*simnode.Node, []Device, string) {
	t.Helper()
	n := simnode.NewBuiltin(profile, simnode.WithDriverVersion(driver))
	t.Cleanup(n.Close)
	count, _ := n.DeviceGetCount()
	var devs []Device
	for i := range count {
		d, _ := n.DeviceGetHandleByIndex(i)
		if slices.Contains(migGPUs, i) {
			if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			if cur, _, _ := d.GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE {
				if err := n.ResetGPU(i); err != nil {
					t.Fatal(err)
				}
			}
		}
		devs = append(devs, d)
	}
	return n, devs, t.TempDir()
}

func uuidOf(t *testing.T, d Device) string {
	t.Helper()
	u, ret := d.GetUUID()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return u
}

// TestModesOnSimulatedDrivers: the manager's choice against the simulated
// driver's answers: r615 GPUs get driver limits, except in MIG mode; an
// older driver, or no cgroup v2, leaves MPS or the watchdog.
func TestModesOnSimulatedDrivers(t *testing.T) {
	tests := []struct {
		name   string
		driver string
		mig    []int
		noV2   bool
		mps    bool
		off    bool
		want   map[int]Mode
		reason map[int]string
	}{
		{name: "r615", driver: "615.40.01", mps: true, mig: []int{1},
			want:   map[int]Mode{0: ModeDriver, 1: ModeMPS, 7: ModeDriver},
			reason: map[int]string{1: "MIG mode on"}},
		{name: "r550", driver: "550.54.15", mps: true,
			want:   map[int]Mode{0: ModeMPS, 7: ModeMPS},
			reason: map[int]string{0: "predates r615"}},
		{name: "r550 without MPS", driver: "550.54.15",
			want: map[int]Mode{0: ModeWatchdog}},
		{name: "r615 on cgroup v1", driver: "615.40.01", noV2: true,
			want: map[int]Mode{0: ModeWatchdog}, reason: map[int]string{0: "no cgroup v2"}},
		{name: "r615 turned off", driver: "615.40.01", mps: true, off: true,
			want: map[int]Mode{0: ModeMPS, 7: ModeMPS}, reason: map[int]string{0: "turned off by --memory-limits=off"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, devs, root := simNode(t, "dgx-h100", tc.driver, tc.mig...)
			if tc.noV2 {
				root = ""
			}
			m, err := New(Config{CgroupRoot: root, DriverVersion: tc.driver, MPS: tc.mps, Off: tc.off, Devices: devs})
			if err != nil {
				t.Fatal(err)
			}
			names := m.ModeNames()
			ds := m.Decisions()
			if len(ds) != len(devs) {
				t.Fatalf("%d decisions for %d GPUs", len(ds), len(devs))
			}
			byUUID := map[string]Decision{}
			for _, d := range ds {
				byUUID[d.UUID] = d
			}
			for i, want := range tc.want {
				d := byUUID[uuidOf(t, devs[i])]
				if d.Mode != want || !strings.Contains(d.Reason, tc.reason[i]) {
					t.Errorf("GPU %d: %s (%s), want %s with reason containing %q", i, d.Mode, d.Reason, want, tc.reason[i])
				}
				if got := names[d.UUID]; got != string(want) {
					t.Errorf("GPU %d: ModeNames %q, want %q", i, got, want)
				}
			}
		})
	}
}

// TestSetAndClear: a container's limits set through the manager hold on
// the simulated driver: its process fails past the hard limit, the
// neighbour's does not; clearing lifts them.
func TestSetAndClear(t *testing.T) {
	n, devs, root := simNode(t, "dgx-h100", "615.40.01", 1)
	m, err := New(Config{CgroupRoot: root, DriverVersion: "615.40.01", MPS: true, Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	const ctr = "/kubepods.slice/kubepods-pod1.slice/cri-containerd-c1.scope"
	ns := filepath.Join(root, ctr)
	if err := os.MkdirAll(ns, 0o755); err != nil {
		t.Fatal(err)
	}
	gpu0, gpu1, gpu2 := uuidOf(t, devs[0]), uuidOf(t, devs[1]), uuidOf(t, devs[2])
	set, err := m.Set(ctr, []Fraction{
		{GPUUUID: gpu0, RequestBytes: 10 * gib, LimitBytes: 12 * gib},
		{GPUUUID: gpu1, RequestBytes: 5 * gib}, // MIG mode: not the driver's
		{GPUUUID: gpu2, RequestBytes: 4 * gib},
		{GPUUUID: gpu2, RequestBytes: 2 * gib, LimitBytes: 3 * gib},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{gpu0, gpu2}
	slices.Sort(want)
	if !slices.Equal(set, want) {
		t.Errorf("set on %v, want %v (sorted)", set, want)
	}
	limits := func(i int) (nvml.MemoryLimits_v1, nvml.Return) { return devs[i].GetMemoryLimits_v1(ns) }
	if l, ret := limits(0); ret != nvml.SUCCESS || l.SoftLimit != 10*gib || l.HardLimit != 12*gib {
		t.Errorf("GPU 0: %+v, %v; want soft 10 GiB, hard 12 GiB", l, ret)
	}
	if l, ret := limits(2); ret != nvml.SUCCESS || l.SoftLimit != 6*gib || l.HardLimit != 7*gib {
		t.Errorf("GPU 2 (two fractions): %+v, %v; want soft 6 GiB, hard 7 GiB", l, ret)
	}

	// Two borrowing fractions of one GPU whose limits sum past its memory:
	// the hard limit is the GPU's memory, which the driver takes.
	mem, ret := devs[3].GetMemoryInfo()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	gpu3 := uuidOf(t, devs[3])
	if _, err := m.Set(ctr, []Fraction{{GPUUUID: gpu3, RequestBytes: 10 * gib, LimitBytes: mem.Total}, {GPUUUID: gpu3, RequestBytes: 10 * gib, LimitBytes: mem.Total}}); err != nil {
		t.Fatalf("limits summing past the GPU: %v", err)
	}
	if l, ret := limits(3); ret != nvml.SUCCESS || l.SoftLimit != 20*gib || l.HardLimit != mem.Total {
		t.Errorf("GPU 3 (limits past its memory): %+v, %v; want soft 20 GiB, hard %d", l, ret, mem.Total)
	}
	set = append(set, gpu3)

	if err := n.StartProcess(0, simnode.ProcessSpec{PID: 10, MemoryBytes: 10 * gib, Cgroup: ns}); err != nil {
		t.Fatal(err)
	}
	if err := n.Allocate(10, 3*gib); !errors.Is(err, nvml.ERROR_MEMORY) {
		t.Errorf("allocation to 13 GiB under a 12 GiB limit: %v, want ERROR_MEMORY", err)
	}
	if err := n.StartProcess(0, simnode.ProcessSpec{PID: 20, MemoryBytes: 30 * gib, Cgroup: filepath.Join(root, "kubepods.slice", "other")}); err != nil {
		t.Errorf("neighbour: %v", err)
	}

	if err := m.Clear(ctr, set); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2, 3} {
		if _, ret := limits(i); ret != nvml.ERROR_NOT_FOUND {
			t.Errorf("GPU %d after Clear: %v, want ERROR_NOT_FOUND", i, ret)
		}
	}
	if err := n.Allocate(10, 3*gib); err != nil {
		t.Errorf("allocation after Clear: %v", err)
	}
	// A container whose cgroup is gone has nothing left to clear.
	if err := os.Remove(ns); err != nil {
		t.Fatal(err)
	}
	if err := m.Clear(ctr, []string{gpu0}); err != nil {
		t.Errorf("Clear after the cgroup went: %v", err)
	}
}

func TestSetRefusesBadFractions(t *testing.T) {
	_, devs, root := simNode(t, "dgx-h100", "615.40.01")
	m, err := New(Config{CgroupRoot: root, DriverVersion: "615.40.01", Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	const ctr = "/kubepods/pod1/c1"
	ns := filepath.Join(root, ctr)
	if err := os.MkdirAll(ns, 0o755); err != nil {
		t.Fatal(err)
	}
	gpu0 := uuidOf(t, devs[0])
	good := Fraction{GPUUUID: gpu0, RequestBytes: gib}
	tests := []struct {
		name string
		f    Fraction
		want string
	}{
		{name: "no request", f: Fraction{GPUUUID: uuidOf(t, devs[1])}, want: "no memory request"},
		{name: "limit below request", f: Fraction{GPUUUID: uuidOf(t, devs[1]), RequestBytes: 2 * gib, LimitBytes: gib}, want: "below the request"},
		{name: "unknown GPU", f: Fraction{GPUUUID: "GPU-nope", RequestBytes: gib}, want: "GPU-nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Set(ctr, []Fraction{good, tc.f})
			if !errors.Is(err, ErrBadFraction) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Set = %v, want ErrBadFraction containing %q", err, tc.want)
			}
			if _, ret := devs[0].GetMemoryLimits_v1(ns); ret != nvml.ERROR_NOT_FOUND {
				t.Errorf("GPU 0 limited after a refused Set: %v", ret)
			}
		})
	}
}

// TestSetAllOrNothing: when the driver refuses one GPU, the limits set on
// the others in the same call are cleared.
func TestSetAllOrNothing(t *testing.T) {
	n, devs, root := simNode(t, "dgx-h100", "615.40.01")
	m, err := New(Config{CgroupRoot: root, DriverVersion: "615.40.01", Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	const ctr = "/kubepods/pod1/c1"
	ns := filepath.Join(root, ctr)
	if err := os.MkdirAll(ns, 0o755); err != nil {
		t.Fatal(err)
	}
	var fs []Fraction
	for _, i := range []int{3, 4, 5} {
		fs = append(fs, Fraction{GPUUUID: uuidOf(t, devs[i]), RequestBytes: gib})
	}
	// The second GPU set (in UUID order) is refused.
	uuids := []string{fs[0].GPUUUID, fs[1].GPUUUID, fs[2].GPUUUID}
	slices.Sort(uuids)
	refused := -1
	for i, d := range devs {
		if uuidOf(t, d) == uuids[1] {
			refused = i
		}
	}
	n.InjectFault("SetMemoryLimits_v1", simnode.FaultSpec{GPU: &refused, Return: nvml.ERROR_NO_PERMISSION})
	if _, err := m.Set(ctr, fs); !errors.Is(err, ErrSet) || !errors.Is(err, nvml.ERROR_NO_PERMISSION) || !strings.Contains(err.Error(), uuids[1]) {
		t.Fatalf("Set = %v, want ErrSet with ERROR_NO_PERMISSION naming %s", err, uuids[1])
	}
	for _, i := range []int{3, 4, 5} {
		if _, ret := devs[i].GetMemoryLimits_v1(ns); ret != nvml.ERROR_NOT_FOUND {
			t.Errorf("GPU %d limited after a failed Set: %v", i, ret)
		}
	}
}
