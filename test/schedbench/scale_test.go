package schedbench

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/pkg/trace"
)

// TestScaleNodes checks that a synthetic cluster has the node count asked,
// unique names, no CPU-only node, and at a multiple of the trace's GPU
// nodes exactly the trace's model mix times that multiple.
func TestScaleNodes(t *testing.T) {
	nodes := []trace.Node{
		{Name: "openb-node-0001", CPUMilli: 64000, MemoryMiB: 262144, NumGPU: 2, Model: "P100"},
		{Name: "openb-node-0002", CPUMilli: 96000, MemoryMiB: 393216, NumGPU: 8, Model: "G2"},
		{Name: "openb-node-0003", CPUMilli: 32000, MemoryMiB: 131072},
		{Name: "openb-node-0004", CPUMilli: 64000, MemoryMiB: 262144, NumGPU: 4, Model: "T4"},
	}
	mix := func(ns []trace.Node) map[string]int {
		m := map[string]int{}
		for _, n := range ns {
			m[fmt.Sprintf("%s/%d/%d/%d", n.Model, n.NumGPU, n.CPUMilli, n.MemoryMiB)]++
		}
		return m
	}
	want := map[string]int{}
	for k, v := range mix(nodes) {
		if !strings.HasPrefix(k, "/") { // a CPU-only node has no model
			want[k] = 7 * v
		}
	}
	got := ScaleNodes(nodes, 21, 42)
	if len(got) != 21 {
		t.Fatalf("ScaleNodes(21) = %d nodes", len(got))
	}
	if m := mix(got); !maps.Equal(m, want) {
		t.Fatalf("ScaleNodes(21) mix = %v, want 7 times the trace's GPU nodes %v", m, want)
	}
	names := map[string]bool{}
	for _, n := range got {
		if names[NodeName(n)] {
			t.Fatalf("ScaleNodes: node name %s twice", NodeName(n))
		}
		names[NodeName(n)] = true
	}
	if small := ScaleNodes(nodes, 2, 42); len(small) != 2 || small[0].Name == small[1].Name || small[0].NumGPU == 0 || small[1].NumGPU == 0 {
		t.Fatalf("ScaleNodes(2) = %v, want 2 distinct GPU nodes", small)
	}
	if a, b := ScaleNodes(nodes, 10, 1), ScaleNodes(nodes, 10, 1); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("ScaleNodes is not deterministic: %v vs %v", a, b)
	}
}

// TestSampleScaled checks that past the list's length pods are copied
// under new names, in trace order, and that below it the draw is Sample's.
func TestSampleScaled(t *testing.T) {
	pods := readPods(t)
	if a, b := SampleScaled(pods, 3, 5), Sample(pods, 3, 5); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("SampleScaled(3) = %v, want Sample's %v", a, b)
	}
	got := SampleScaled(pods, 10, 5)
	if len(got) != 10 {
		t.Fatalf("SampleScaled(10) = %d pods", len(got))
	}
	names := map[string]bool{}
	for i, p := range got {
		if names[ObjectName(p)] {
			t.Fatalf("SampleScaled: pod name %s twice", ObjectName(p))
		}
		names[ObjectName(p)] = true
		if i > 0 && p.CreationTime < got[i-1].CreationTime {
			t.Fatalf("SampleScaled: not in trace order at %d: %v", i, got)
		}
	}
	if got := SampleScaled(nil, 10, 5); len(got) != 0 {
		t.Fatalf("SampleScaled(no pods) = %v", got)
	}
}

func TestLongestPause(t *testing.T) {
	t0 := time.Unix(1000, 0)
	times := []time.Time{t0, t0.Add(time.Second), t0.Add(5 * time.Second), t0.Add(6 * time.Second)}
	if got := LongestPause(times); got != 4*time.Second {
		t.Fatalf("LongestPause = %v, want 4s", got)
	}
	if got := LongestPause(times[:1]); got != 0 {
		t.Fatalf("LongestPause(one bind) = %v, want 0", got)
	}
}

func TestParseStatCPU(t *testing.T) {
	// A name with spaces and a parenthesis, utime 250 and stime 50 ticks.
	stat := "1234 (gpud (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 1000000 2000 18446744073709551615"
	got, err := parseStatCPU(stat)
	if err != nil || got != 3*time.Second {
		t.Fatalf("parseStatCPU = %v, %v; want 3s", got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 abc 50"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q) did not fail", bad)
		}
	}
}

func FuzzParseStatCPU(f *testing.F) {
	f.Add("1234 (gpud) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 1000000 2000")
	f.Add("1 ()) R")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseStatCPU(s)
		if err == nil && d < 0 {
			t.Fatalf("parseStatCPU(%q) = %v, negative", s, d)
		}
	})
}

func TestScaleTable(t *testing.T) {
	rs := []Result{
		{Scheduler: "kube-scheduler", Pods: 100, Bound: 100, FirstBind: time.Second, LastBind: 11 * time.Second, BurstCPU: 20 * time.Second, PeakRSSBytes: 300 << 20},
		{Scheduler: "gpud scheduler", Pods: 100, Bound: 90, FirstBind: time.Second, LastBind: 3*time.Second + 250*time.Millisecond, UnallocatedAfterBurst: 4.5, LongestPause: 2 * time.Second},
	}
	out := ScaleTable(rs)
	for _, want := range []string{"9.9", "4.00", "200.0", "4.50 (burst)", "- (all fit)", "300"} {
		if !strings.Contains(out, want) {
			t.Errorf("ScaleTable lacks %q:\n%s", want, out)
		}
	}
}
