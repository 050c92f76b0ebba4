package simulate

import (
	"errors"
	"math"
	randv1 "math/rand"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/trace"
)

// TestRunOpenBRejects shows that the inputs which made `gpud sim openb` run
// forever with growing memory (no GPU pod; --tune NaN, Inf, 1e6) are
// errors, returned at once.
func TestRunOpenBRejects(t *testing.T) {
	nodes, pods := synthetic([]nodeShape{{4, 64, 8, "T4"}}, []podShape{{1, 4, 1, 500, ""}}, 20, 1)
	cpuOnly := []trace.Pod{{Name: "p0", CPUMilli: 1000, MemoryMiB: 1}, {Name: "p1", CPUMilli: 2000, MemoryMiB: 1}}
	_, many := synthetic(nil, []podShape{{1, 4, 1, 500, ""}}, 6000, 1)
	big, _ := synthetic([]nodeShape{{100, 64, 8, "T4"}}, nil, 0, 1)
	noGPUs := []trace.Node{{Name: "n0", CPUMilli: 64000, MemoryMiB: 1 << 20}}
	tests := []struct {
		name    string
		cfg     Config
		want    string
		wantErr error
	}{
		{name: "no GPU pod", cfg: Config{Nodes: nodes, Pods: cpuOnly}, wantErr: ErrNoGPUPods},
		{name: "no GPU node", cfg: Config{Nodes: noGPUs, Pods: pods}, wantErr: ErrNoGPUNodes},
		{name: "tune NaN", cfg: Config{Nodes: nodes, Pods: pods, Tune: math.NaN()}, want: "tune NaN"},
		{name: "tune Inf", cfg: Config{Nodes: nodes, Pods: pods, Tune: math.Inf(1)}, want: "tune +Inf"},
		{name: "tune 1e6", cfg: Config{Nodes: nodes, Pods: pods, Tune: 1e6}, want: "tune 1e+06"},
		{name: "tune negative", cfg: Config{Nodes: nodes, Pods: pods, Tune: -1}, want: "tune -1"},
		{name: "tune asks too many pods", cfg: Config{Nodes: big, Pods: []trace.Pod{{Name: "p", NumGPU: 1, GPUMilli: 1}}, Tune: 10}, want: "more than 2000000"},
		{name: "no pods", cfg: Config{Nodes: nodes}, want: "no pods"},
		{name: "too many points", cfg: Config{Nodes: nodes, Pods: many, Seeds: make([]uint64, 10000)}, want: "1 policies × 10000 seeds × about 6000 pods is more than 50000000 points"},
		{name: "too many GPUs on a node", cfg: Config{Nodes: []trace.Node{{Name: "n", NumGPU: 65}}, Pods: pods}, wantErr: allocator.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Policies, tc.cfg.Workload = []string{"gpud"}, "w"
			if tc.cfg.Seeds == nil {
				tc.cfg.Seeds = []uint64{1}
			}
			_, _, err := RunOpenB(t.Context(), tc.cfg)
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %v %q", err, tc.wantErr, tc.want)
			}
		})
	}
}

// TestResampleWithoutGPUPods: appending copies can never reach a GPU target
// when no pod asks for a GPU; Resample returns the shuffled pods.
func TestResampleWithoutGPUPods(t *testing.T) {
	reqs := []allocator.Request{{CPUMilli: 1000}, {CPUMilli: 2000}}
	if out := Resample(reqs, 8000, 1.3, randv1.New(randv1.NewSource(1))); len(out) != 2 {
		t.Fatalf("Resample() = %d pods, want 2", len(out))
	}
}
