package decide

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// noNodeMessage explains why no node took a pod without device requests.
func noNodeMessage(pin string, why map[string]int) string {
	if pin != "" && len(why) == 0 {
		return fmt.Sprintf("the pod's allocated claims pin it to node %s", pin)
	}
	if len(why) == 0 {
		return "no node with gpud devices"
	}
	return "nodes refused: " + countList(why)
}

// countList spells counts as "3 cpu, 1 cordoned", largest first.
func countList(m map[string]int) string {
	keys := slices.Sorted(mapKeysInt(m))
	slices.SortStableFunc(keys, func(a, b string) int { return cmp.Compare(m[b], m[a]) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}

func mapKeysInt(m map[string]int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// allocatorReasons names the allocator's node filter reasons for users.
var allocatorReasons = map[string]string{
	allocator.ReasonCPU:       "short of CPU",
	allocator.ReasonMemory:    "short of memory",
	allocator.ReasonModel:     "without a matching GPU",
	allocator.ReasonGPU:       "short of free GPU",
	allocator.ReasonNoGPU:     "without GPUs",
	allocator.ReasonMIG:       "without room for the MIG slice",
	allocator.ReasonGPUMemory: "with unknown GPU memory",
}

// noFitMessage explains a pod that did not fit, in the allocator's terms:
// what it asks ("no GPU with 40Gi free"), where (models a queue's limits
// leave), and how the nodes fell short.
func (c *cycle) noFitMessage(u *unit, items []*view.Item, err error, pin string, why map[string]int, blocked map[string]jobs.QueueExcess) string {
	var b strings.Builder
	b.WriteString("no ")
	b.WriteString(describe(items))
	if len(blocked) > 0 {
		var allowed []string
		for _, m := range c.fair.models {
			if _, no := blocked[m]; !no {
				allowed = append(allowed, m)
			}
		}
		fmt.Fprintf(&b, " on a %s in queue %s's limit", strings.Join(allowed, " or "), u.queue)
	}
	if pin != "" {
		fmt.Fprintf(&b, " on node %s (the pod's allocated claims pin it there)", pin)
	}
	var nf *allocator.NoFitError
	var parts []string
	if errors.As(err, &nf) {
		keys := slices.Sorted(mapKeysInt(nf.Counts))
		slices.SortStableFunc(keys, func(a, b string) int { return cmp.Compare(nf.Counts[b], nf.Counts[a]) })
		for _, k := range keys {
			r := allocatorReasons[k]
			if r == "" {
				r = k
			}
			parts = append(parts, fmt.Sprintf("%d %s %s", nf.Counts[k], plural(nf.Counts[k], "node", "nodes"), r))
		}
	} else {
		parts = append(parts, trimViewError(err))
	}
	if len(why) > 0 {
		parts = append(parts, "nodes refused: "+countList(why))
	}
	b.WriteString(": ")
	b.WriteString(strings.Join(parts, "; "))
	return b.String()
}

// trimViewError drops the sentinel texts from a view error, keeping the
// claim and the reason.
func trimViewError(err error) string {
	s := err.Error()
	for _, t := range []string{view.ErrNoFit.Error() + ": ", allocator.ErrNoFit.Error() + ": "} {
		s = strings.ReplaceAll(s, t, "")
	}
	return strings.ReplaceAll(s, ": "+view.ErrOverAllocated.Error(), " (too small)")
}

// describe spells what items ask as a place: "GPU with 40Gi free",
// "node with 8 free GPUs", "GPU with room for MIG 1g.10gb".
func describe(items []*view.Item) string {
	one := func(it *view.Item) string {
		switch it.Kind {
		case view.Whole:
			if it.Count == 1 {
				return "free GPU"
			}
			return fmt.Sprintf("node with %d free GPUs", it.Count)
		case view.Fraction:
			s := "GPU with "
			if q, ok := it.Capacity[view.CapacityMemory]; ok {
				s += q.String() + " free"
			}
			if q, ok := it.Capacity[view.CapacityCores]; ok {
				s += " and " + q.String() + "% of its cores"
			}
			return s
		case view.MIG:
			return "GPU with room for MIG " + it.Alloc.MIGProfile
		}
		return "device"
	}
	if len(items) == 1 {
		return one(items[0])
	}
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = strings.TrimPrefix(strings.TrimPrefix(one(it), "node with "), "GPU with ")
	}
	return "node with room for " + strings.Join(parts, " + ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// excessMessage spells a broken queue limit for users: "queue team-a:
// limit 8 GPUs, uses 8, pod asks 1".
func excessMessage(e jobs.QueueExcess, u *unit) string {
	who := "pod"
	if u.group != nil && len(u.pods) > 1 {
		who = "gang"
	}
	var unit string
	var f func(int64) string
	switch {
	case e.Model != "":
		unit, f = e.Model+" GPUs", milliString
	case e.Resource == "gpu_milli":
		unit, f = "GPUs", milliString
	case e.Resource == "mig_slices":
		unit, f = "MIG compute slices", itoa
	case e.Resource == "gpu_memory_mib":
		unit, f = "GPU memory", mibString
	case e.Resource == "cpu_milli":
		unit, f = "CPUs", milliString
	case e.Resource == "memory_mib":
		unit, f = "memory", mibString
	default:
		unit, f = e.Resource, itoa
	}
	return fmt.Sprintf("queue %s: limit %s %s, uses %s, %s asks %s", e.Queue, f(e.Limit), unit, f(e.Use), who, f(e.Need))
}

// milliString spells thousandths as a decimal: 8000 "8", 500 "0.5".
func milliString(m int64) string {
	s := strconv.FormatFloat(float64(m)/1000, 'f', 3, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// mibString spells MiB as Gi when whole, else Mi.
func mibString(m int64) string {
	if m%1024 == 0 {
		return strconv.FormatInt(m/1024, 10) + "Gi"
	}
	return strconv.FormatInt(m, 10) + "Mi"
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// neverFits says why p can never be placed, even on the empty cluster
// ("" if it could): more whole GPUs than any node has that its request
// may use, a fraction larger than any such GPU's memory, or more CPU or
// memory than any node's allocatable. Such a pod is not worth preempting
// for, and its owner must change it.
func (c *cycle) neverFits(p *plan.Pod, items []*view.Item) string {
	if msg, ok := c.fit.neverOf(p); ok {
		return msg
	}
	msg := ""
	for _, it := range items {
		most, mem := c.v.MostPerNode(it)
		name := fmt.Sprintf("claim %s/%s request %q", it.Claim.Namespace, it.Claim.Name, it.Request)
		switch {
		case it.Kind == view.Whole && it.Count > most:
			msg = fmt.Sprintf("never fits: %s asks %d GPUs; the most any node has that the request may use is %d", name, it.Count, most)
		case it.Kind == view.Fraction && mem > 0 && it.Alloc.GPUMemoryMiB<<20 > mem:
			msg = fmt.Sprintf("never fits: %s asks %dMiB of one GPU; the largest GPU the request may use has %dMiB", name, it.Alloc.GPUMemoryMiB, mem>>20)
		}
		if msg != "" {
			break
		}
	}
	if msg == "" {
		cpu, memBytes := requests(p.Pod)
		var maxCPU, maxMiB int64
		for _, n := range c.v.Nodes() {
			maxCPU, maxMiB = max(maxCPU, n.CPUMilli), max(maxMiB, n.MemoryMiB)
		}
		switch {
		case maxCPU > 0 && cpu > maxCPU:
			msg = fmt.Sprintf("never fits: the pod asks %dm CPU; the largest node has %dm allocatable", cpu, maxCPU)
		case maxMiB > 0 && memBytes>>20 > maxMiB:
			msg = fmt.Sprintf("never fits: the pod asks %dMiB of memory; the largest node has %dMiB allocatable", memBytes>>20, maxMiB)
		}
	}
	c.fit.setNever(p, msg)
	return msg
}
