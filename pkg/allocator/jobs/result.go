package jobs

import (
	"errors"
	"fmt"
)

// ErrInvalid reports a malformed job, queue, reservation or node.
var ErrInvalid = errors.New("jobs: invalid")

// ErrUnknownJob reports a job ID the scheduler does not hold.
var ErrUnknownJob = errors.New("jobs: unknown job")

// Reason codes of a pending job.
const (
	// CodeQuota: the job's queue (or an ancestor) would exceed its limit.
	CodeQuota = "quota"
	// CodeModelQuota: no accepted GPU model has per-model quota left.
	CodeModelQuota = "model-quota"
	// CodeCapacity: not enough free capacity, even with preemption.
	CodeCapacity = "capacity"
	// CodeTopology: capacity exists but not within the required domain.
	CodeTopology = "topology"
	// CodeNeverFits: the job does not fit on the empty cluster.
	CodeNeverFits = "never-fits"
	// CodeBlocked: an earlier job is blocked and backfill is off.
	CodeBlocked = "blocked"
	// CodeBackfill: the job fits now but would delay the reserved job.
	CodeBackfill = "backfill"
	// CodePreempted: the job was preempted in this round.
	CodePreempted = "preempted"
)

// Reason explains a pending job: Code is one of the Code constants and
// Message names the quota, constraint or job and how much is missing.
type Reason struct {
	Code    string
	Message string
}

func (r Reason) String() string { return r.Code + ": " + r.Message }

// PodPlacement is where one pod of a job runs.
type PodPlacement struct {
	// Node indexes the nodes given to [New]; NodeName is its name.
	Node     int
	NodeName string
	// GPUs are device indices on the node.
	GPUs []int
	// MilliPerGPU and MemoryMiBPerGPU are taken from each GPU; whole GPUs
	// take 1000 and all their memory (MemoryMiBPerGPU is then the smallest).
	MilliPerGPU     int64
	MemoryMiBPerGPU int64
	// MIGStart is the first memory slice of a MIG instance, -1 otherwise.
	MIGStart int
}

// Start is a job the scheduler started.
type Start struct {
	JobID string
	Pods  []PodPlacement
	// Backfilled is set when the job ran ahead of a blocked job.
	Backfilled bool
}

// Preemption is a running job the scheduler stopped, and for whom.
type Preemption struct {
	JobID string
	// Beneficiary is the job the room was freed for.
	Beneficiary string
	// Why is "priority", "reclaim" or "reservation".
	Why string
}

// Pending is a job left waiting, with its reason.
type Pending struct {
	JobID  string
	Reason Reason
}

// Result is what one [Scheduler.Schedule] call did.
type Result struct {
	Started   []Start
	Preempted []Preemption
	Pending   []Pending
	// Reserved is the blocked job backfill protects, "" if none, and
	// ReservedStart its estimated start (-1 if no later job needed it
	// computed; 1<<62 if unknown).
	Reserved      string
	ReservedStart int64
}

func reasonf(code, format string, args ...any) Reason {
	return Reason{Code: code, Message: fmt.Sprintf(format, args...)}
}
