package cpuaffinity

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/simnode"
)

// dgxH100 is the simulated DGX H100's inventory: 8 GPUs, GPUs 0-3 on NUMA
// node 0 (CPUs 0-55), 4-7 on node 1 (56-111).
func dgxH100(t testing.TB) gpu.Inventory {
	t.Helper()
	inv, err := discovery.New(simnode.NewBuiltin("dgx-h100"), "dgx-h100", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestPlanDGXH100(t *testing.T) {
	inv := dgxH100(t)
	online, _ := Parse("0-111")
	uuid := func(i int) string { return inv.GPUs[i].UUID }
	if inv.GPUs[0].NUMANode != 0 || inv.GPUs[7].NUMANode != 1 {
		t.Fatalf("simulated topology changed: gpu0 numa %d, gpu7 numa %d", inv.GPUs[0].NUMANode, inv.GPUs[7].NUMANode)
	}
	tests := []struct {
		name        string
		c           Container
		wantCPUs    string
		wantWidened bool
		wantSkip    bool
	}{
		{name: "one gpu on node 0", c: Container{GPUs: []string{uuid(0)}, CPURequestMilli: 4000}, wantCPUs: "0-55"},
		{name: "one gpu on node 1", c: Container{GPUs: []string{uuid(5)}}, wantCPUs: "56-111"},
		{name: "two gpus one node", c: Container{GPUs: []string{uuid(1), uuid(2)}, CPURequestMilli: 8000}, wantCPUs: "0-55"},
		{name: "gpus on both nodes: the union", c: Container{GPUs: []string{uuid(3), uuid(4)}}, wantCPUs: "0-111"},
		{name: "request fits the node exactly", c: Container{GPUs: []string{uuid(0)}, CPURequestMilli: 56000}, wantCPUs: "0-55"},
		{name: "request above the node widens to all", c: Container{GPUs: []string{uuid(0)}, CPURequestMilli: 56001}, wantCPUs: "0-111", wantWidened: true},
		{name: "pinned by the CPU manager", c: Container{GPUs: []string{uuid(0)}, CPURequestMilli: 4000, Pinned: true}, wantSkip: true},
		{name: "no gpus", c: Container{CPURequestMilli: 1000}, wantSkip: true},
		{name: "unknown device", c: Container{GPUs: []string{"GPU-nope"}}, wantSkip: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Plan(inv, online, tc.c)
			if (d.Skip != "") != tc.wantSkip {
				t.Fatalf("Plan() skip = %q, want skip %v", d.Skip, tc.wantSkip)
			}
			if tc.wantSkip {
				return
			}
			if got := Format(d.CPUs); got != tc.wantCPUs || d.Widened != tc.wantWidened {
				t.Errorf("Plan() = %s widened %v, want %s widened %v", got, d.Widened, tc.wantCPUs, tc.wantWidened)
			}
		})
	}
}

func TestPlanMIGDeviceUsesParent(t *testing.T) {
	inv := gpu.Inventory{GPUs: []gpu.GPU{{UUID: "GPU-a", CPUAffinity: []int{4, 5, 6, 7}, MIGDevices: []gpu.MIGDevice{{UUID: "MIG-a1"}}}}}
	d := Plan(inv, []int{0, 1, 2, 3, 4, 5, 6, 7}, Container{GPUs: []string{"MIG-a1"}, CPURequestMilli: 500})
	if got := Format(d.CPUs); got != "4-7" {
		t.Errorf("Plan(MIG) = %s (%s), want 4-7", got, d.Skip)
	}
}

func TestPlanUnknownAffinitySkips(t *testing.T) {
	inv := gpu.Inventory{GPUs: []gpu.GPU{{UUID: "GPU-a", NUMANode: -1}}}
	if d := Plan(inv, []int{0, 1}, Container{GPUs: []string{"GPU-a"}}); d.Skip == "" {
		t.Errorf("Plan() = %v, want a skip for unknown affinity", d.CPUs)
	}
}

func TestFormatParse(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		out  string
	}{
		{"", nil, ""},
		{"0", []int{0}, "0"},
		{"0-3,8", []int{0, 1, 2, 3, 8}, "0-3,8"},
		{"5,1-2\n", []int{5, 1, 2}, "1-2,5"},
	}
	for _, tc := range tests {
		got, err := Parse(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if f := Format(got); f != tc.out {
			t.Errorf("Format(%v) = %q, want %q", got, f, tc.out)
		}
	}
	for _, bad := range []string{"a", "3-1", "-1", "0-99999999"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = nil error, want one", bad)
		}
	}
}

func TestCPURequestMilli(t *testing.T) {
	tests := []struct {
		name, file, value string
		want              int64
	}{
		{"v1 4 cpus", "cpu.shares", "4096", 4000},
		{"v1 250m", "cpu.shares", "256", 250},
		{"v1 none", "cpu.shares", "2", 0},
		{"v2 4 cpus", "cpu.weight", "157", 4000}, // runc: 1+(4096-2)*9999/262142 = 157
		{"v2 none", "cpu.weight", "1", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, tc.file, tc.value)
			got, err := CPURequestMilli(dir)
			if err != nil {
				t.Fatal(err)
			}
			// cpu.weight keeps about 1/64 of a CPU: allow 1%.
			if got < tc.want-tc.want/100 || got > tc.want+tc.want/100 {
				t.Errorf("CPURequestMilli = %d, want %d within 1%%", got, tc.want)
			}
		})
	}
}

func BenchmarkPlan(b *testing.B) {
	inv := dgxH100(b)
	online, _ := Parse("0-111")
	c := Container{GPUs: []string{inv.GPUs[3].UUID, inv.GPUs[4].UUID}, CPURequestMilli: 8000}
	b.ReportAllocs()
	for b.Loop() {
		_ = Plan(inv, online, c)
	}
}

func writeFile(t *testing.T, dir, name, value string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0o644); err != nil {
		t.Fatal(err)
	}
}
