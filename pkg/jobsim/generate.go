package jobsim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/trace"
)

// GenOptions shape a synthetic trace.
type GenOptions struct {
	Seed uint64
	// Jobs is the number of jobs; 0 means 20,000.
	Jobs int
	// CapacityGPUs is the cluster's GPU count the load is relative to.
	CapacityGPUs int
	// Load is offered GPU-time over capacity-time; 0 means 0.9.
	Load float64
	// GangFraction of jobs are multi-pod gangs; 0 means 0.05.
	GangFraction float64
	// MaxRuntimeSeconds caps runtimes (openb's running pods are censored at
	// the trace end); 0 means 2 days.
	MaxRuntimeSeconds int64
}

// Bounds on [GenOptions].
const (
	// MaxGenJobs bounds GenOptions.Jobs: a trace's rows are bounded too.
	MaxGenJobs = trace.MaxRows
	// MaxLoad bounds GenOptions.Load.
	MaxLoad = 100
)

// defaults fills in zero fields and rejects values out of range (negative,
// NaN, infinite or above the bounds).
func (o *GenOptions) defaults() error {
	if o.Jobs == 0 {
		o.Jobs = 20000
	}
	if o.Load == 0 {
		o.Load = 0.9
	}
	if o.GangFraction == 0 {
		o.GangFraction = 0.05
	}
	if o.MaxRuntimeSeconds == 0 {
		o.MaxRuntimeSeconds = 2 * 86400
	}
	switch {
	case o.Jobs < 0 || o.Jobs > MaxGenJobs:
		return fmt.Errorf("jobs %d outside 1..%d", o.Jobs, MaxGenJobs)
	case !(o.Load > 0 && o.Load <= MaxLoad):
		return fmt.Errorf("load %v: want a number in (0, %d]", o.Load, MaxLoad)
	case !(o.GangFraction > 0 && o.GangFraction <= 1):
		return fmt.Errorf("gang fraction %v: want a number in (0, 1]", o.GangFraction)
	case o.MaxRuntimeSeconds < 0 || o.MaxRuntimeSeconds > trace.MaxSeconds:
		return fmt.Errorf("max runtime %d s outside 1..%d", o.MaxRuntimeSeconds, trace.MaxSeconds)
	case o.CapacityGPUs <= 0:
		return errors.New("capacity must be positive: pass the cluster's node file")
	}
	return nil
}

// Queues the generator assigns, with the default quotas [DefaultQueues]
// gives them.
const (
	QueueProd     = "prod"
	QueueResearch = "research"
	QueueDev      = "dev"
	QueueBatch    = "batch"
)

// Generate derives a job trace from openb pods: each job's size (CPU,
// memory, GPUs or milli-GPU, model constraint) and runtime (deletion minus
// creation) come from a pod drawn at random; gangs take 2-8 pods from the
// multi-GPU pods; queue and priority follow the pod's QoS; arrivals are
// Poisson at the rate that offers Load × CapacityGPUs. Same seed, same trace.
func Generate(pods []trace.Pod, o GenOptions) ([]TraceJob, error) {
	if err := o.defaults(); err != nil {
		return nil, fmt.Errorf("jobsim: generate: %w", err)
	}
	var single, multi []trace.Pod
	for _, p := range pods {
		if p.DeletionTime <= p.CreationTime {
			continue
		}
		single = append(single, p)
		if p.NumGPU >= 2 && (p.GPUMilli == 0 || p.GPUMilli == allocator.MilliPerGPU) {
			multi = append(multi, p)
		}
	}
	if len(single) == 0 {
		return nil, errors.New("jobsim: generate: no pod with a deletion time after its creation time")
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	out := make([]TraceJob, o.Jobs)
	var gpuSeconds float64
	for i := range out {
		j := &out[i]
		j.ID = fmt.Sprintf("job-%05d", i)
		if len(multi) > 0 && rng.Float64() < o.GangFraction {
			p := multi[rng.IntN(len(multi))]
			j.Pod = podOf(p)
			j.Pods = []int{2, 2, 4, 4, 8}[rng.IntN(5)]
			j.RuntimeSeconds = runtimeOf(p, o.MaxRuntimeSeconds)
			j.Queue, j.Priority = QueueResearch, 1
			j.Checkpointable = rng.Float64() < 0.7
			if rng.IntN(2) == 0 {
				j.Topology, j.Required = jobs.LevelRack, true
			} else {
				j.Topology = jobs.LevelNVLink
			}
		} else {
			p := single[rng.IntN(len(single))]
			j.Pod = podOf(p)
			j.Pods = 1
			j.RuntimeSeconds = runtimeOf(p, o.MaxRuntimeSeconds)
			switch {
			case p.QoS == "BE":
				j.Queue, j.Priority, j.Preemptible = QueueBatch, 0, true
			case p.NumGPU == 1 && p.GPUMilli > 0 && p.GPUMilli < allocator.MilliPerGPU:
				j.Queue, j.Priority = QueueDev, 1
			default:
				j.Queue, j.Priority = QueueProd, 2
			}
			j.Checkpointable = rng.Float64() < 0.3
		}
		if rng.IntN(10) == 0 {
			j.Priority++
		}
		if rng.IntN(10) != 0 { // 10% give no estimate
			j.EstimateSeconds = int64(math.Ceil(float64(j.RuntimeSeconds)*(1+2*rng.Float64())/60)) * 60
		}
		gpuSeconds += gpus(j) * float64(j.RuntimeSeconds)
	}
	// Poisson arrivals at the rate that offers Load of the capacity.
	meanGap := gpuSeconds / float64(o.Jobs) / (o.Load * float64(o.CapacityGPUs))
	t := 0.0
	for i := range out {
		t += rng.ExpFloat64() * meanGap
		if t > trace.MaxSeconds {
			return nil, fmt.Errorf("jobsim: generate: load %v spreads %d jobs over more than %d seconds", o.Load, o.Jobs, trace.MaxSeconds)
		}
		out[i].Submit = int64(t)
	}
	slices.SortStableFunc(out, func(a, b TraceJob) int { return cmp.Compare(a.Submit, b.Submit) })
	return out, nil
}

func podOf(p trace.Pod) jobs.Pod {
	q := jobs.Pod{CPUMilli: p.CPUMilli, MemoryMiB: p.MemoryMiB, NumGPU: p.NumGPU, Models: allocator.ParseModels(p.GPUSpec)}
	if p.NumGPU == 1 && p.GPUMilli > 0 && p.GPUMilli < allocator.MilliPerGPU {
		q.GPUMilli = p.GPUMilli
	}
	return q
}

func runtimeOf(p trace.Pod, maxSeconds int64) int64 {
	return min(max(p.DeletionTime-p.CreationTime, 1), maxSeconds)
}

// gpus is a job's GPU count (fractions count their share).
func gpus(j *TraceJob) float64 {
	p := j.Pod
	per := float64(p.NumGPU)
	if p.GPUMilli > 0 && p.GPUMilli < allocator.MilliPerGPU {
		per = float64(p.GPUMilli) / allocator.MilliPerGPU
	}
	if p.MIG != "" {
		if prof, err := jobs.LookupMIG(p.MIG); err == nil {
			per = float64(prof.Compute) / jobs.MIGSlicesPerGPU
		}
	}
	return per * float64(max(j.Pods, 1))
}

// DefaultQueues gives each queue found in js a guaranteed share of the
// cluster's GPUs (prod 40%, research 30%, dev 20%, batch 10%, others an
// equal split of what is left), borrowing up to the whole cluster.
func DefaultQueues(js []TraceJob, capacityMilli int64) []jobs.Queue {
	share := map[string]float64{QueueProd: 0.4, QueueResearch: 0.3, QueueDev: 0.2, QueueBatch: 0.1}
	var names []string
	seen := map[string]bool{}
	for _, j := range js {
		if !seen[j.Queue] {
			seen[j.Queue] = true
			names = append(names, j.Queue)
		}
	}
	slices.Sort(names)
	var others int
	known := 0.0
	for _, n := range names {
		if s, ok := share[n]; ok {
			known += s
		} else {
			others++
		}
	}
	out := make([]jobs.Queue, 0, len(names))
	for _, n := range names {
		s, ok := share[n]
		if !ok {
			s = max(0, 1-known) / float64(others)
		}
		out = append(out, jobs.Queue{Name: n, Quota: jobs.Quota{Guaranteed: jobs.Resources{GPUMilli: int64(s * float64(capacityMilli))}}})
	}
	return out
}
