package memwatch_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/memwatch"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/procattr"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/timeslice"
)

// nvmlProcs lists the simulated node's processes through the node's one
// process reader, as the agent does.
func nvmlProcs(n *simnode.Node) memwatch.ProcessLister { return discovery.ProcessReader{Lib: n} }

// The watchdog reads the agent's sources as they are, without adapters.
var (
	_ memwatch.ProcessLister     = discovery.ProcessReader{}
	_ memwatch.ContainerLookup   = procattr.Resolver{}
	_ memwatch.PodNamer          = procattr.PodLogs{}
	_ memwatch.AssignmentLister  = (*podresources.Client)(nil)
	_ timeslice.AllocationLister = (*podresources.Client)(nil)
)

// fakeCgroups maps pids to pod UIDs, as /proc/<pid>/cgroup would.
type fakeCgroups map[uint32]string

func (f fakeCgroups) Lookup(pid uint32) (memwatch.ContainerRef, error) {
	uid, ok := f[pid]
	if !ok {
		return memwatch.ContainerRef{}, fmt.Errorf("pid %d: not in a container", pid)
	}
	return memwatch.ContainerRef{PodUID: uid, ContainerID: "c-" + uid}, nil
}

type fakePods map[string]memwatch.PodName

func (f fakePods) Pods() (map[string]memwatch.PodName, error) { return f, nil }

type fakeAssignments []memwatch.Assignment

func (f fakeAssignments) List(context.Context) ([]memwatch.Assignment, error) { return f, nil }

// killer records kills and ends the simulated process.
type killer struct {
	n      *simnode.Node
	mu     sync.Mutex
	killed []uint32
}

func (k *killer) kill(pid uint32) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.killed = append(k.killed, pid)
	if !k.n.RemoveProcess(pid) {
		return fmt.Errorf("pid %d not running", pid)
	}
	return nil
}

func TestWatchdogModes(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		mode        memwatch.Enforce
		names       bool
		wantViol    []string
		wantKilled  []uint32
		wantRunning []uint32
	}{
		{mode: memwatch.EnforceOff, wantRunning: []uint32{11, 12, 21, 31}},
		{mode: memwatch.EnforceReport, names: true,
			wantViol:    []string{"ml/small on GPU uses 12288 MiB, limit 10240 MiB (pids 11,12)", "ml/mig-a on MIG uses 24576 MiB, limit MIGHALF MiB (pids 31)"},
			wantRunning: []uint32{11, 12, 21, 31}},
		{mode: memwatch.EnforceKill, names: true,
			wantViol:    []string{"ml/small on GPU uses 12288 MiB, limit 10240 MiB (pids 11,12)", "ml/mig-a on MIG uses 24576 MiB, limit MIGHALF MiB (pids 31)"},
			wantKilled:  []uint32{11, 31}, // the largest of ml/small, then the MIG one
			wantRunning: []uint32{12, 21}},
		{mode: memwatch.EnforceReport, names: false, // no pod names: the MIG device has one holder, the GPU two
			wantViol:    []string{"ml/mig-a on MIG uses 24576 MiB, limit MIGHALF MiB (pids 31)"},
			wantRunning: []uint32{11, 12, 21, 31}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s names=%v", tc.mode, tc.names), func(t *testing.T) {
			n := simnode.NewBuiltin("dgx-h100")
			layouts, err := mig.ParseLayoutFile([]byte("version: v1\nmig-configs:\n  a:\n    - devices: [1]\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 2}\n"))
			if err != nil {
				t.Fatal(err)
			}
			st, _ := mig.ReadState(n)
			want, _ := layouts.Resolve("a", st)
			p, err := mig.NewPlan(st, want, nil, mig.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := mig.NewApplier(n, nil).Apply(t.Context(), st, want, p); err != nil {
				t.Fatal(err)
			}
			inv, err := discovery.New(n, "sim", nil).Inventory()
			if err != nil {
				t.Fatal(err)
			}
			gpu0, migA := inv.GPUs[0].UUID, inv.GPUs[1].MIGDevices[0].UUID
			// GPU 0: two unequal shares. MIG device: 2 replicas, memory split.
			sharing := timeslice.Config{Devices: map[string]timeslice.Sharing{
				"0":  {Shares: []timeslice.Share{{MemoryMiB: 10240}, {MemoryMiB: 40960}}},
				migA: {Replicas: 2, LimitMemory: true},
			}}
			for _, pr := range []struct {
				pid uint32
				dev string
				mem uint64
			}{{11, gpu0, 8 * gib}, {12, gpu0, 4 * gib}, {21, gpu0, 30 * gib}, {31, migA, 24 * gib}} {
				if pr.dev == gpu0 {
					err = n.AddProcess(0, pr.pid, pr.mem)
				} else {
					err = n.AddMIGProcess(pr.dev, pr.pid, pr.mem)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			k := &killer{n: n}
			var told []string // what the Events hooks were told
			var toldKills []uint32
			cfg := memwatch.WatchdogConfig{
				OnViolation: func(v memwatch.Violation, mode memwatch.Enforce) {
					told = append(told, fmt.Sprintf("%s %s/%s %s", mode, v.Namespace, v.Pod, v.PodUID))
				},
				OnKill: func(v memwatch.Violation, pid uint32, procBytes uint64) {
					if procBytes == 0 || v.UsedBytes <= v.LimitBytes {
						t.Errorf("kill of %d told with %d bytes, violation %v", pid, procBytes, v)
					}
					toldKills = append(toldKills, pid)
				},
				Mode:       tc.mode,
				Sharing:    func() timeslice.Config { return sharing },
				Inventory:  func() gpu.Inventory { return inv },
				Processes:  nvmlProcs(n),
				Containers: fakeCgroups{11: "uid-small", 12: "uid-small", 21: "uid-big", 31: "uid-mig"},
				Assignments: fakeAssignments{
					{Namespace: "ml", Pod: "small", Container: "main", ResourceName: "nvidia.com/gpu.shared", DeviceIDs: []string{timeslice.ReplicaID(gpu0, 0)}},
					{Namespace: "ml", Pod: "big", Container: "main", ResourceName: "nvidia.com/gpu.shared", DeviceIDs: []string{timeslice.ReplicaID(gpu0, 1)}},
					{Namespace: "ml", Pod: "mig-a", Container: "main", ResourceName: "nvidia.com/mig-3g.40gb.shared", DeviceIDs: []string{timeslice.ReplicaID(migA, 1)}},
				},
				Kill: k.kill,
			}
			if tc.names {
				cfg.Pods = fakePods{"uid-small": {Namespace: "ml", Name: "small"}, "uid-big": {Namespace: "ml", Name: "big"}, "uid-mig": {Namespace: "ml", Name: "mig-a"}}
			}
			w, err := memwatch.NewWatchdog(cfg)
			if err != nil {
				t.Fatal(err)
			}
			vs, err := w.Check(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range vs {
				s := v.String()
				s = replaceUUID(s, gpu0, "GPU")
				got = append(got, replaceUUID(s, migA, "MIG"))
			}
			slices.Sort(got)
			half := fmt.Sprint(inv.GPUs[1].MIGDevices[0].MemoryBytes >> 20 / 2)
			var wantViol []string
			for _, v := range tc.wantViol {
				wantViol = append(wantViol, strings.Replace(v, "MIGHALF", half, 1))
			}
			slices.Sort(wantViol)
			if !slices.Equal(got, wantViol) {
				t.Errorf("violations:\n got %q\nwant %q", got, wantViol)
			}
			if viol, kills := w.Counts(); viol != uint64(len(tc.wantViol)) || kills != uint64(len(tc.wantKilled)) {
				t.Errorf("counts = %d violations, %d kills; want %d, %d", viol, kills, len(tc.wantViol), len(tc.wantKilled))
			}
			if slices.Sort(k.killed); !slices.Equal(k.killed, tc.wantKilled) {
				t.Errorf("killed %v, want %v", k.killed, tc.wantKilled)
			}
			ps, _ := discovery.ReadProcesses(n)
			var running []uint32
			for _, p := range ps {
				running = append(running, p.PID)
			}
			if !slices.Equal(running, tc.wantRunning) {
				t.Errorf("running %v, want %v", running, tc.wantRunning)
			}
			// A second pass counts no new violation: a report is per episode.
			if _, err := w.Check(t.Context()); err != nil {
				t.Fatal(err)
			}
			if viol, _ := w.Counts(); viol != uint64(len(tc.wantViol)) {
				t.Errorf("after a second check: %d violations counted, want still %d", viol, len(tc.wantViol))
			}
			if len(told) != len(tc.wantViol) {
				t.Errorf("OnViolation told %q, want once per violation (%d)", told, len(tc.wantViol))
			}
			for _, s := range told {
				if !strings.HasPrefix(s, string(tc.mode)+" ml/") || !strings.Contains(s, " uid-") {
					t.Errorf("OnViolation told %q, want the mode, the pod and its uid", s)
				}
			}
			if slices.Sort(toldKills); !slices.Equal(toldKills, tc.wantKilled) {
				t.Errorf("OnKill told %v, want %v", toldKills, tc.wantKilled)
			}
			if tc.mode == memwatch.EnforceKill && len(w.Active()) != 0 {
				t.Errorf("after kills, still active: %v", w.Active())
			}
		})
	}
}

func replaceUUID(s, uuid, with string) string { return strings.ReplaceAll(s, uuid, with) }

func TestParseEnforce(t *testing.T) {
	for _, s := range []string{"off", "report", "kill"} {
		if e, err := memwatch.ParseEnforce(s); err != nil || string(e) != s {
			t.Errorf("ParseEnforce(%q) = %q, %v", s, e, err)
		}
	}
	if _, err := memwatch.ParseEnforce("warn"); err == nil {
		t.Error("ParseEnforce(warn) accepted")
	}
	if _, err := memwatch.NewWatchdog(memwatch.WatchdogConfig{Mode: memwatch.EnforceKill}); err == nil {
		t.Error("kill mode without sources or Kill accepted")
	}
}

// TestWatchdogBorrowing: a share with memoryLimitMiB may use memory above
// its request up to the limit; only past the limit is it a violation.
func TestWatchdogBorrowing(t *testing.T) {
	const gib = 1 << 30
	n := simnode.NewBuiltin("dgx-h100")
	t.Cleanup(n.Close)
	inv, err := discovery.New(n, "sim", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	gpu0 := inv.GPUs[0].UUID
	sharing := timeslice.Config{Devices: map[string]timeslice.Sharing{
		"0": {Shares: []timeslice.Share{{MemoryMiB: 10240, MemoryLimitMiB: 16384}, {MemoryMiB: 40960}}}}}
	if err := n.AddProcess(0, 11, 12*gib); err != nil { // above the request, below the limit
		t.Fatal(err)
	}
	w, err := memwatch.NewWatchdog(memwatch.WatchdogConfig{
		Mode:       memwatch.EnforceReport,
		Sharing:    func() timeslice.Config { return sharing },
		Inventory:  func() gpu.Inventory { return inv },
		Processes:  nvmlProcs(n),
		Containers: fakeCgroups{11: "uid-small", 12: "uid-small"},
		Pods:       fakePods{"uid-small": {Namespace: "ml", Name: "small"}},
		Assignments: fakeAssignments{{Namespace: "ml", Pod: "small", Container: "main", ResourceName: "nvidia.com/gpu.shared",
			DeviceIDs: []string{timeslice.ReplicaID(gpu0, 0)}}},
		Kill: func(uint32) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if vs, err := w.Check(t.Context()); err != nil || len(vs) != 0 {
		t.Fatalf("borrowing below the limit: %v, %v; want no violation", vs, err)
	}
	if err := n.AddProcess(0, 12, 6*gib); err != nil { // 18 GiB in all: past the 16 GiB limit
		t.Fatal(err)
	}
	vs, err := w.Check(t.Context())
	if err != nil || len(vs) != 1 || vs[0].LimitBytes != 16*gib {
		t.Fatalf("past the limit: %v, %v; want one violation at the 16 GiB limit", vs, err)
	}
}
