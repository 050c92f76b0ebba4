package jobs

import "fmt"

// Node and GPU labels the scheduler reads. A node without an NVLink domain
// label is its own NVLink domain; a node without a rack or zone label is in
// the unnamed rack or zone.
const (
	// LabelNVLinkDomain names the NVLink domain (clique) a node's GPUs are
	// in, as NVIDIA GPU feature discovery labels multi-node NVLink systems.
	LabelNVLinkDomain = "nvidia.com/gpu.clique"
	// LabelRack names the node's rack.
	LabelRack = "topology.gpud.io/rack"
	// LabelZone names the node's zone.
	LabelZone = "topology.kubernetes.io/zone"
	// LabelMIG on a GPU, set to "true", makes the GPU a MIG GPU: it serves
	// only MIG requests.
	LabelMIG = "nvidia.com/mig.enabled"
)

// Level is a topology level a gang is kept within.
type Level int

// Topology levels, narrowest first.
const (
	LevelNone Level = iota
	LevelNVLink
	LevelRack
	LevelZone
)

func (l Level) String() string {
	switch l {
	case LevelNVLink:
		return "nvlink"
	case LevelRack:
		return "rack"
	case LevelZone:
		return "zone"
	}
	return "none"
}

// ParseLevel reads "", "none", "nvlink", "rack" or "zone".
func ParseLevel(s string) (Level, error) {
	switch s {
	case "", "none":
		return LevelNone, nil
	case "nvlink":
		return LevelNVLink, nil
	case "rack":
		return LevelRack, nil
	case "zone":
		return LevelZone, nil
	}
	return 0, fmt.Errorf("topology level %q (want none, nvlink, rack or zone): %w", s, ErrInvalid)
}

// Pod is the demand of each pod of a job. Exactly one GPU form applies:
// NumGPU whole GPUs; or a fraction of one GPU (NumGPU == 1 with
// 0 < GPUMilli < 1000, optionally GPUMemoryMiB); or a MIG instance (MIG set,
// NumGPU ignored). GPUMemoryMiB on a fraction defaults to GPUMilli/1000 of
// the chosen GPU's memory.
type Pod struct {
	CPUMilli     int64
	MemoryMiB    int64
	NumGPU       int
	GPUMilli     int64
	GPUMemoryMiB int64
	// MIG is a profile name from [MIGProfiles], e.g. "3g.40gb".
	MIG string
	// Models, if not empty, lists the GPU models the pod accepts.
	Models []string
}

// Job is a gang of identical pods placed all or nothing.
type Job struct {
	ID       string
	Queue    string
	Priority int
	// Pods is the gang size; 0 is taken as 1.
	Pods int
	Pod  Pod
	// Topology keeps all pods within one domain of this level; Required
	// makes it a constraint, otherwise narrower is preferred and wider taken.
	Topology Level
	Required bool
	// Checkpointable jobs lose little when preempted; victims are chosen
	// among them first.
	Checkpointable bool
	// Preemptible jobs may run on capacity reserved for another queue and
	// are preempted when the owner needs it.
	Preemptible bool
	// EstimateSeconds is the runtime estimate backfill relies on; 0 means
	// unknown (such a job never backfills ahead of a reserved gang).
	EstimateSeconds int64
	// Submit is the arrival time; FIFO order and ties use it.
	Submit int64
}

// Resources is an exact amount of every resource the scheduler counts.
type Resources struct {
	CPUMilli     int64
	MemoryMiB    int64
	GPUMilli     int64
	GPUMemoryMiB int64
	MIGSlices    int64
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{r.CPUMilli + o.CPUMilli, r.MemoryMiB + o.MemoryMiB, r.GPUMilli + o.GPUMilli,
		r.GPUMemoryMiB + o.GPUMemoryMiB, r.MIGSlices + o.MIGSlices}
}

// Sub returns r - o.
func (r Resources) Sub(o Resources) Resources {
	return Resources{r.CPUMilli - o.CPUMilli, r.MemoryMiB - o.MemoryMiB, r.GPUMilli - o.GPUMilli,
		r.GPUMemoryMiB - o.GPUMemoryMiB, r.MIGSlices - o.MIGSlices}
}

// resourceNames index [Resources.at].
var resourceNames = [...]string{"cpu_milli", "memory_mib", "gpu_milli", "gpu_memory_mib", "mig_slices"}

func (r *Resources) at(i int) *int64 {
	switch i {
	case 0:
		return &r.CPUMilli
	case 1:
		return &r.MemoryMiB
	case 2:
		return &r.GPUMilli
	case 3:
		return &r.GPUMemoryMiB
	}
	return &r.MIGSlices
}

// Quota bounds a queue. A zero field in Limit means "no limit" for that
// resource; Guaranteed is what reclaim restores to the queue.
type Quota struct {
	Guaranteed Resources
	Limit      Resources
	// ModelGuaranteed and ModelLimit are milli-GPU per GPU model (whole,
	// fractional and MIG GPUs of that model alike; a MIG slice counts 1000/7
	// rounded up). A model absent from ModelLimit is unlimited.
	ModelGuaranteed map[string]int64
	ModelLimit      map[string]int64
}

// Queue is a node of the queue tree. Jobs are submitted to leaf queues;
// limits apply at every ancestor.
type Queue struct {
	Name   string
	Parent string // "" for a top-level queue
	// Weight scales the queue's fair share against its siblings; 0 is 1.
	Weight float64
	Quota  Quota
	// Objective, if set, weighs the policy's terms for this queue's pods
	// in gpud scheduler (pkg/scheduler/decide; a Queue object's
	// spec.objectives); nil takes the scheduler's default (--objectives).
	// The replay ([Scheduler]) weighs every queue by [Options.Objective].
	Objective *Objective
}

// Reservation holds Nodes for Queue during [Start, End). Other queues' jobs
// may run there only if preemptible; the owner preempts them when it needs
// the room.
type Reservation struct {
	Name       string
	Queue      string
	Nodes      []string
	Start, End int64
}

// Options choose the policies. The zero value is strict FIFO: arrival order,
// no fair share, no backfill, no preemption, quotas still enforced.
type Options struct {
	// FairShare orders queues by weighted DRF share (below-guarantee queues
	// first) instead of global arrival order.
	FairShare bool
	// Backfill runs jobs behind a blocked job when they do not delay its
	// reserved start (EASY). Without it the first capacity-blocked job
	// blocks every later one.
	Backfill bool
	// Preemption lets higher-priority jobs, queues under their guarantee and
	// reservation owners take capacity.
	Preemption bool
	// Order orders pending jobs; the zero value is arrival order.
	Order Order
	// LASThresholds are [OrderLAS]'s attained-service queue limits in
	// GPU-seconds, ascending; nil means [DefaultLASThresholds].
	LASThresholds []int64
	// Objective, if set, weighs the policy's terms; nil is today's policy.
	Objective *Objective
}

// Gpud is the default option set.
var Gpud = Options{FairShare: true, Backfill: true, Preemption: true}
