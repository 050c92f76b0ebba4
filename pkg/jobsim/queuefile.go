package jobsim

import (
	"errors"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// QueueFile is the YAML form of a queue tree and reservations for
// `gpud sim jobs --queues FILE` (see docs/job-trace.md).
type QueueFile struct {
	Queues       []QueueSpec       `json:"queues"`
	Reservations []ReservationSpec `json:"reservations,omitempty"`
}

// QueueSpec is one queue: jobs go to leaves, limits bind every ancestor.
type QueueSpec struct {
	Name   string  `json:"name"`
	Parent string  `json:"parent,omitempty"`
	Weight float64 `json:"weight,omitempty"`
	// Guaranteed is what the queue may reclaim from others; Limit caps what
	// it may hold, borrowing included (zero fields: no limit).
	Guaranteed ResourceSpec `json:"guaranteed,omitempty"`
	Limit      ResourceSpec `json:"limit,omitempty"`
	// ModelGuaranteed and ModelLimit are milli-GPU per GPU model.
	ModelGuaranteed map[string]int64 `json:"modelGuaranteed,omitempty"`
	ModelLimit      map[string]int64 `json:"modelLimit,omitempty"`
}

// ResourceSpec counts resources in the scheduler's exact units.
type ResourceSpec struct {
	CPUMilli     int64 `json:"cpuMilli,omitempty"`
	MemoryMiB    int64 `json:"memoryMiB,omitempty"`
	GPUMilli     int64 `json:"gpuMilli,omitempty"`
	GPUMemoryMiB int64 `json:"gpuMemoryMiB,omitempty"`
	MIGSlices    int64 `json:"migSlices,omitempty"`
}

// ReservationSpec holds nodes for a queue during [start, end) seconds.
type ReservationSpec struct {
	Name   string   `json:"name"`
	Queue  string   `json:"queue"`
	Nodes  []string `json:"nodes"`
	StartS int64    `json:"startS"`
	EndS   int64    `json:"endS"`
}

func (r ResourceSpec) resources() jobs.Resources {
	return jobs.Resources{CPUMilli: r.CPUMilli, MemoryMiB: r.MemoryMiB, GPUMilli: r.GPUMilli, GPUMemoryMiB: r.GPUMemoryMiB, MIGSlices: r.MIGSlices}
}

// ReadQueueFile parses a queue file strictly: an unknown key, a queue
// without a name, a duplicate or a missing parent is an error naming it.
func ReadQueueFile(path string) ([]jobs.Queue, []jobs.Reservation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("queue file: %w", err)
	}
	var f QueueFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, nil, fmt.Errorf("queue file %s: %w", path, err)
	}
	if len(f.Queues) == 0 {
		return nil, nil, fmt.Errorf("queue file %s: no queues", path)
	}
	names := map[string]bool{}
	var errs []error
	for i, q := range f.Queues {
		switch {
		case q.Name == "":
			errs = append(errs, fmt.Errorf("queue %d has no name", i+1))
		case names[q.Name]:
			errs = append(errs, fmt.Errorf("queue %q defined twice", q.Name))
		}
		names[q.Name] = true
	}
	out := make([]jobs.Queue, 0, len(f.Queues))
	for _, q := range f.Queues {
		if q.Parent != "" && !names[q.Parent] {
			errs = append(errs, fmt.Errorf("queue %q: parent %q is not defined", q.Name, q.Parent))
		}
		out = append(out, jobs.Queue{Name: q.Name, Parent: q.Parent, Weight: q.Weight, Quota: jobs.Quota{
			Guaranteed: q.Guaranteed.resources(), Limit: q.Limit.resources(),
			ModelGuaranteed: q.ModelGuaranteed, ModelLimit: q.ModelLimit,
		}})
	}
	rs := make([]jobs.Reservation, 0, len(f.Reservations))
	for _, r := range f.Reservations {
		if !names[r.Queue] {
			errs = append(errs, fmt.Errorf("reservation %q: queue %q is not defined", r.Name, r.Queue))
		}
		rs = append(rs, jobs.Reservation{Name: r.Name, Queue: r.Queue, Nodes: r.Nodes, Start: r.StartS, End: r.EndS})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, fmt.Errorf("queue file %s: %w", path, err)
	}
	return out, rs, nil
}
