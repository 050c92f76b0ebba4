package kubectlgpud

import (
	"cmp"
	"slices"
)

// QueueUse is what the pods of one queue (label gpud.io/queue) hold and
// wait for. Guarantees and limits are not on the API yet: they live in
// the scheduler's --queues file.
type QueueUse struct {
	Name    string `json:"name"`
	Running int    `json:"running"`
	Pending int    `json:"pending"`
	// GPUs counts whole GPUs held (DRA devices and the device plugin's
	// GPU resource).
	GPUs int `json:"gpus"`
	// MIG counts MIG slices held.
	MIG int `json:"mig"`
	// FractionBytes sums the memory of fractions held.
	FractionBytes int64 `json:"fractionBytes"`
}

// Queues adds up [Pods] by queue label; pods without one are under "".
// Sorted by name.
func Queues(s *Snapshot, prefix string) []QueueUse {
	by := map[string]*QueueUse{}
	for _, p := range Pods(s, prefix) {
		if p.Phase == "Succeeded" || p.Phase == "Failed" {
			continue
		}
		q := by[p.Queue]
		if q == nil {
			q = &QueueUse{Name: p.Queue}
			by[p.Queue] = q
		}
		switch {
		case p.Node == "":
			q.Pending++
		default:
			q.Running++
		}
		for _, d := range p.Devices {
			switch d.Kind {
			case KindGPU:
				q.GPUs++
			case KindMIG:
				q.MIG++
			case KindFraction:
				q.FractionBytes += d.MemoryBytes
			case KindResource:
				switch {
				case d.Profile != "":
					q.MIG += d.Count
				case d.Device == prefix+"/gpu":
					q.GPUs += d.Count
				}
			}
		}
	}
	out := make([]QueueUse, 0, len(by))
	for _, q := range by {
		out = append(out, *q)
	}
	slices.SortFunc(out, func(a, b QueueUse) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
