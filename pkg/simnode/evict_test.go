package simnode

import (
	"errors"
	"reflect"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestSoftLimitEviction: on a full GPU, a container allocating within its
// soft limit (its guarantee) gets the memory of a borrower (a container
// above its soft limit), which the driver kills; a borrower gets nothing
// by eviction, a process within its own soft limit is never evicted, and
// a driver without per-cgroup limits (r550) evicts nobody.
func TestSoftLimitEviction(t *testing.T) {
	type proc struct {
		pid    uint32
		cgroup string // "borrower", "tenant", "unlimited", "" (none)
		gib    uint64
	}
	tests := []struct {
		name   string
		driver string
		procs  []proc
		// alloc: pid allocates allocGiB more (a new process in the
		// tenant's cgroup when pid is not running).
		pid       uint32
		allocGiB  uint64
		wantErr   error
		wantGone  []uint32 // evicted, in order
		wantCgrps []string
	}{
		{
			name:  "tenant within its guarantee evicts the borrower",
			procs: []proc{{1, "borrower", 50}, {2, "tenant", 20}},
			pid:   2, allocGiB: 20, wantGone: []uint32{1}, wantCgrps: []string{"borrower"},
		},
		{
			name:  "a new process of the tenant evicts too",
			procs: []proc{{1, "borrower", 50}, {2, "tenant", 20}},
			pid:   3, allocGiB: 20, wantGone: []uint32{1}, wantCgrps: []string{"borrower"},
		},
		{
			name:  "largest process of the borrower first, and no more than needed",
			procs: []proc{{1, "borrower", 10}, {4, "borrower", 40}, {2, "tenant", 20}},
			pid:   2, allocGiB: 20, wantGone: []uint32{4}, wantCgrps: []string{"borrower"},
		},
		{
			name:  "a cgroup without limits is guaranteed nothing, a process in no cgroup is left alone",
			procs: []proc{{1, "unlimited", 30}, {5, "", 20}, {2, "tenant", 20}},
			pid:   2, allocGiB: 20, wantGone: []uint32{1}, wantCgrps: []string{"unlimited"},
		},
		{
			name:  "past the tenant's soft limit it borrows itself: no eviction, out of memory",
			procs: []proc{{1, "borrower", 50}, {2, "tenant", 20}},
			pid:   2, allocGiB: 25, wantErr: nvml.ERROR_MEMORY,
		},
		{
			name:  "a borrower within its guarantee is not evicted",
			procs: []proc{{1, "borrower", 20}, {5, "", 40}, {2, "tenant", 10}},
			pid:   2, allocGiB: 20, wantErr: nvml.ERROR_MEMORY,
		},
		{
			name:   "r550 has no limits: out of memory",
			driver: "550.54.15", procs: []proc{{1, "borrower", 50}, {2, "tenant", 20}},
			pid: 2, allocGiB: 20, wantErr: nvml.ERROR_MEMORY,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			cg := map[string]string{
				"borrower":  cgroupDir(t, root, "kubepods", "pod-a", "c1"),
				"tenant":    cgroupDir(t, root, "kubepods", "pod-b", "c1"),
				"unlimited": cgroupDir(t, root, "kubepods", "pod-c", "c1"),
				"":          "",
			}
			driver := r615
			if tc.driver != "" {
				driver = tc.driver
			}
			n := NewBuiltin("dgx-h100", WithDriverVersion(driver))
			t.Cleanup(n.Close)
			d, _ := n.DeviceGetHandleByIndex(0)
			if driver == r615 {
				// 20 GiB guaranteed to each; the borrower may use 60.
				if ret := d.SetMemoryLimits_v1(cg["borrower"], 20*gib, 60*gib); ret != nvml.SUCCESS {
					t.Fatal(ret)
				}
				if ret := d.SetMemoryLimits_v1(cg["tenant"], 40*gib, 60*gib); ret != nvml.SUCCESS {
					t.Fatal(ret)
				}
			}
			for _, p := range tc.procs {
				if err := n.StartProcess(0, ProcessSpec{PID: p.pid, MemoryBytes: p.gib * gib, Cgroup: cg[p.cgroup]}); err != nil {
					t.Fatalf("start pid %d: %v", p.pid, err)
				}
			}
			// Fill the GPU with a process in no cgroup, so the allocation
			// does not fit.
			mem, _ := d.GetMemoryInfo()
			if err := n.StartProcess(0, ProcessSpec{PID: 99, MemoryBytes: mem.Free - gib}); err != nil {
				t.Fatal(err)
			}
			before := pids(d)
			var err error
			if _, running := n.Limits(tc.pid); running {
				err = n.Allocate(tc.pid, tc.allocGiB*gib)
			} else {
				err = n.StartProcess(0, ProcessSpec{PID: tc.pid, MemoryBytes: tc.allocGiB * gib, Cgroup: cg["tenant"]})
			}
			if !errors.Is(err, tc.wantErr) || (err != nil && tc.wantErr == nil) {
				t.Fatalf("allocation: %v, want %v", err, tc.wantErr)
			}
			var gone []uint32
			var cgroups []string
			for _, e := range n.Evictions() {
				gone = append(gone, e.PID)
				cgroups = append(cgroups, e.Cgroup)
				if e.ForPID != tc.pid || e.GPU != 0 {
					t.Errorf("eviction %+v: want for pid %d on GPU 0", e, tc.pid)
				}
			}
			var wantCgroups []string
			for _, c := range tc.wantCgrps {
				wantCgroups = append(wantCgroups, cg[c])
			}
			if !reflect.DeepEqual(gone, tc.wantGone) || !reflect.DeepEqual(cgroups, wantCgroups) {
				t.Errorf("evicted pids %v of %v, want %v of %v", gone, cgroups, tc.wantGone, wantCgroups)
			}
			after := pids(d)
			for pid := range before {
				if _, running := after[pid]; !running && !contains(tc.wantGone, pid) {
					t.Errorf("pid %d is gone, but was not to be evicted", pid)
				}
			}
			for _, pid := range tc.wantGone {
				if _, running := after[pid]; running {
					t.Errorf("evicted pid %d still runs", pid)
				}
			}
			if tc.wantErr == nil {
				if got := after[tc.pid]; got == 0 {
					t.Errorf("pid %d holds nothing after its allocation", tc.pid)
				}
			}
		})
	}
}

func pids(d nvml.Device) map[uint32]uint64 {
	out := map[uint32]uint64{}
	for _, p := range d.(*Device).processes(-1) {
		out[p.Pid] = p.UsedGpuMemory
	}
	return out
}

func contains(s []uint32, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
