package memlimit

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpud/gpud/pkg/simnode"
)

func TestEvicted(t *testing.T) {
	const g = "GPU-0"
	sample := func(used, free uint64, cgs map[string]CgroupUse) Sample {
		return Sample{GPUUUID: g, UsedBytes: used * gib, FreeBytes: free * gib, Cgroups: cgs}
	}
	use := func(used, soft uint64) CgroupUse { return CgroupUse{UsedBytes: used * gib, SoftBytes: soft * gib} }
	tests := []struct {
		name      string
		prev, cur Sample
		want      []string
	}{
		{name: "borrower killed as the tenant grows past what was free",
			prev: sample(70, 9, map[string]CgroupUse{"/a": use(50, 20), "/b": use(20, 40)}),
			cur:  sample(40, 39, map[string]CgroupUse{"/a": use(0, 20), "/b": use(40, 40)}),
			want: []string{"/a"}},
		{name: "borrower's cgroup gone as a new container takes its room",
			prev: sample(70, 9, map[string]CgroupUse{"/a": use(50, 20)}),
			cur:  sample(55, 24, map[string]CgroupUse{"/a": use(0, 0)}),
			want: []string{"/a"}},
		{name: "borrower frees memory with no pressure",
			prev: sample(70, 9, map[string]CgroupUse{"/a": use(50, 20), "/b": use(20, 40)}),
			cur:  sample(45, 34, map[string]CgroupUse{"/a": use(20, 20), "/b": use(25, 40)}),
		},
		{name: "others grew by exactly what was free: no pressure",
			prev: sample(70, 9, map[string]CgroupUse{"/a": use(50, 20)}),
			cur:  sample(59, 20, map[string]CgroupUse{"/a": use(30, 20)}),
		},
		{name: "a container within its soft limit that drops is not a borrower",
			prev: sample(70, 9, map[string]CgroupUse{"/a": use(20, 20), "/b": use(50, 60)}),
			cur:  sample(60, 19, map[string]CgroupUse{"/a": use(0, 20), "/b": use(60, 60)}),
		},
		{name: "a container not polled now is not judged",
			prev: sample(70, 9, map[string]CgroupUse{"/a": use(50, 20)}),
			cur:  sample(40, 39, map[string]CgroupUse{}),
		},
		{name: "another GPU's sample",
			prev: Sample{GPUUUID: "GPU-1", UsedBytes: 70 * gib, FreeBytes: 9 * gib, Cgroups: map[string]CgroupUse{"/a": use(50, 20)}},
			cur:  sample(40, 39, map[string]CgroupUse{"/a": use(0, 20)}),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range Evicted(tc.prev, tc.cur) {
				got = append(got, e.Cgroup)
				if e.BeforeBytes <= e.SoftBytes || e.AfterBytes >= e.BeforeBytes || e.OthersGrewBytes <= e.FreeBytesBefore {
					t.Errorf("eviction %+v: want a borrower that lost memory while others grew past what was free", e)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Evicted = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSampleSeesSimulatedEviction: on the simulated r615 driver, a
// borrower evicted by a tenant allocating within its guarantee is what
// two samples around the eviction show; a tenant that grows into free
// memory shows nothing.
func TestSampleSeesSimulatedEviction(t *testing.T) {
	n, devs, root := simNode(t, "dgx-h100", "615.40.01")
	m, err := New(Config{CgroupRoot: root, DriverVersion: "615.40.01", Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	uuid := uuidOf(t, devs[0])
	for _, cg := range []string{"borrower", "tenant"} {
		if err := os.MkdirAll(filepath.Join(root, cg), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Set("/borrower", []Fraction{{GPUUUID: uuid, RequestBytes: 20 * gib, LimitBytes: 60 * gib}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Set("/tenant", []Fraction{{GPUUUID: uuid, RequestBytes: 40 * gib}}); err != nil {
		t.Fatal(err)
	}
	cgroups := map[string][]string{uuid: {"/borrower", "/tenant"}}
	one := func() Sample {
		t.Helper()
		s := m.Sample(cgroups)
		if len(s) != 1 {
			t.Fatalf("Sample = %+v, want one GPU", s)
		}
		return s[0]
	}
	start := func(pid uint32, cg string, bytes uint64) {
		t.Helper()
		spec := simnode.ProcessSpec{PID: pid, MemoryBytes: bytes}
		if cg != "" {
			spec.Cgroup = filepath.Join(root, cg)
		}
		if err := n.StartProcess(0, spec); err != nil {
			t.Fatal(err)
		}
	}
	start(1, "borrower", 50*gib)
	start(2, "tenant", 10*gib)
	s0 := one()
	if err := n.Allocate(2, 5*gib); err != nil { // fits in what is free
		t.Fatal(err)
	}
	s1 := one()
	if got := Evicted(s0, s1); len(got) != 0 {
		t.Errorf("growing into free memory: Evicted = %+v, want none", got)
	}
	mem, _ := devs[0].GetMemoryInfo()
	start(3, "", mem.Free) // a process outside the containers fills the GPU
	s2 := one()
	if err := n.Allocate(2, 20*gib); err != nil { // 35 GiB: within its 40
		t.Fatal(err)
	}
	if ev := n.Evictions(); len(ev) != 1 || ev[0].PID != 1 {
		t.Fatalf("simulated evictions %+v, want pid 1", ev)
	}
	got := Evicted(s2, one())
	if len(got) != 1 || got[0].Cgroup != "/borrower" || got[0].BeforeBytes != 50*gib || got[0].AfterBytes != 0 || got[0].SoftBytes != 20*gib {
		t.Errorf("Evicted = %+v, want /borrower from 50 GiB to 0, soft 20 GiB", got)
	}
}
