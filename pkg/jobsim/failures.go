package jobsim

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gpud/gpud/pkg/allocator"
)

// Defaults and bounds of [FailureOptions].
const (
	// DefaultDetectSeconds: with healing, the scheduler sees a failure
	// within one telemetry interval and restarts the jobs on it.
	DefaultDetectSeconds = 60
	// DefaultManualSeconds: without healing, a job on a failed GPU hangs,
	// holding all its GPUs, until a person notices and restarts it.
	DefaultManualSeconds = 4 * 3600
	// DefaultRepairSeconds is how long a failed GPU stays out.
	DefaultRepairSeconds = 24 * 3600
	// MaxFailureRate bounds FailureOptions.RatePerGPUDay.
	MaxFailureRate = 10
	// MaxDelaySeconds bounds the detection, manual and repair delays.
	MaxDelaySeconds = 30 * 86400
)

// FailureOptions inject GPU failures into a replay: a Poisson process of
// RatePerGPUDay failures per GPU per day, each failing one GPU chosen at
// random (or, for BurstFraction of them, every GPU of its node), seeded.
// A failed GPU takes no new pods and is repaired after RepairSeconds. A job
// with a pod on it stops making progress and, after DetectSeconds (Heal) or
// ManualSeconds (without), is restarted elsewhere from its last checkpoint
// (from zero if not checkpointable), holding its GPUs until then.
type FailureOptions struct {
	RatePerGPUDay float64
	BurstFraction float64
	Seed          uint64
	Heal          bool
	// DetectSeconds, ManualSeconds and RepairSeconds: 0 means the defaults.
	DetectSeconds, ManualSeconds, RepairSeconds int64
}

func (o *FailureOptions) defaults() error {
	if o.DetectSeconds == 0 {
		o.DetectSeconds = DefaultDetectSeconds
	}
	if o.ManualSeconds == 0 {
		o.ManualSeconds = DefaultManualSeconds
	}
	if o.RepairSeconds == 0 {
		o.RepairSeconds = DefaultRepairSeconds
	}
	switch {
	case !(o.RatePerGPUDay >= 0 && o.RatePerGPUDay <= MaxFailureRate):
		return fmt.Errorf("GPU failure rate %v per GPU-day: want 0..%d", o.RatePerGPUDay, MaxFailureRate)
	case !(o.BurstFraction >= 0 && o.BurstFraction <= 1):
		return fmt.Errorf("burst fraction %v: want 0..1", o.BurstFraction)
	case o.DetectSeconds < 1 || o.DetectSeconds > MaxDelaySeconds:
		return fmt.Errorf("detection delay %d s: want 1..%d", o.DetectSeconds, MaxDelaySeconds)
	case o.ManualSeconds < 1 || o.ManualSeconds > MaxDelaySeconds:
		return fmt.Errorf("manual delay %d s: want 1..%d", o.ManualSeconds, MaxDelaySeconds)
	case o.RepairSeconds < 1 || o.RepairSeconds > MaxDelaySeconds:
		return fmt.Errorf("repair time %d s: want 1..%d", o.RepairSeconds, MaxDelaySeconds)
	}
	return nil
}

// FailureStats is what injected failures cost.
type FailureStats struct {
	Events         int // failure events (a burst is one)
	GPUsFailed     int
	JobsHit        int // job restarts caused by failures
	Restarts       int
	LostGPUHours   float64 // GPU-hours of jobs on failed GPUs: hang time + work since the last checkpoint
	HangGPUHours   float64 // of LostGPUHours, GPU-hours held while hung
	RepairGPUHours float64 // GPU-hours failed GPUs were out for repair
}

// gpuRef names one GPU of the cluster.
type gpuRef struct {
	node string
	gpu  int
}

// faults draws failures and tracks failed GPUs.
type faults struct {
	o      FailureOptions
	rng    *rand.Rand
	gpus   []gpuRef
	byNode map[string][]int // node -> indices into gpus
	idx    map[gpuRef]int
	failed map[gpuRef]bool
	meanS  float64 // mean seconds between failure events
	next   int64   // time of the next failure event, -1 if none
	stats  FailureStats
}

func newFaults(nodes []allocator.Node, o FailureOptions, t0 int64) *faults {
	f := &faults{o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x5851f42d4c957f2d)), byNode: map[string][]int{}, idx: map[gpuRef]int{}, failed: map[gpuRef]bool{}, next: -1}
	for _, n := range nodes {
		for g, gpu := range n.GPUs {
			if gpu.Unhealthy {
				continue
			}
			f.byNode[n.Name] = append(f.byNode[n.Name], len(f.gpus))
			f.idx[gpuRef{n.Name, g}] = len(f.gpus)
			f.gpus = append(f.gpus, gpuRef{n.Name, g})
		}
	}
	if o.RatePerGPUDay > 0 && len(f.gpus) > 0 {
		f.meanS = 86400 / (o.RatePerGPUDay * float64(len(f.gpus)))
		f.draw(t0)
	}
	return f
}

// draw sets the next failure time after t.
func (f *faults) draw(t int64) {
	f.next = t + max(1, int64(math.Round(f.rng.ExpFloat64()*f.meanS)))
}

// victims are the GPUs the failure event now takes down (not failed yet).
func (f *faults) victims() []gpuRef {
	f.stats.Events++
	ref := f.gpus[f.rng.IntN(len(f.gpus))]
	set := []gpuRef{ref}
	if f.o.BurstFraction > 0 && f.rng.Float64() < f.o.BurstFraction {
		set = set[:0]
		for _, k := range f.byNode[ref.node] {
			set = append(set, f.gpus[k])
		}
	}
	out := set[:0]
	for _, r := range set {
		if !f.failed[r] {
			f.failed[r] = true
			out = append(out, r)
		}
	}
	f.stats.GPUsFailed += len(out)
	f.stats.RepairGPUHours += float64(len(out)) * float64(f.o.RepairSeconds) / 3600
	return out
}

// delay is how long a job on a failed GPU hangs before its restart.
func (f *faults) delay() int64 {
	if f.o.Heal {
		return f.o.DetectSeconds
	}
	return f.o.ManualSeconds
}

// index is g's index into gpus.
func (f *faults) index(g gpuRef) int { return f.idx[g] }
