// Package cpuaffinity decides and writes the cpuset of a GPU container so
// that its CPUs sit on its GPUs' NUMA node(s) (--cpu-affinity align).
//
// [Plan] is pure: from the container's GPUs (their CPU affinity in the
// inventory), its CPU request and whether the kubelet's CPU manager pinned
// it, it returns the CPUs to use or why it leaves the container alone.
// [Writer] writes a cpuset through containerd/cgroups v3 on cgroup v2 (when
// the unified hierarchy has the cpuset controller) or on the cgroup v1
// cpuset hierarchy. It reads and writes only under the mounts it is given.
package cpuaffinity

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpud/gpud/pkg/gpu"
)

// Container is what Plan needs to know of one container.
type Container struct {
	// GPUs are the UUIDs of the container's GPUs or MIG devices (a MIG
	// device counts as its parent GPU).
	GPUs []string
	// CPURequestMilli is the container's CPU request in millicores; 0 when
	// it requested none.
	CPURequestMilli int64
	// Pinned is true when the kubelet's CPU manager gave the container
	// exclusive CPUs (a Guaranteed pod with an integer CPU request under
	// the static policy): its cpuset is the kubelet's to set.
	Pinned bool
}

// Decision is Plan's answer: CPUs to write, or the reason to write none.
type Decision struct {
	// CPUs is the cpuset to write, sorted; nil when Skip is set.
	CPUs []int
	// Widened is true when the GPUs' NUMA CPUs were fewer than the
	// request, so CPUs is every online CPU.
	Widened bool
	// Skip says why the container keeps the cpuset it has.
	Skip string
}

// Plan computes the cpuset for c: the union of the CPUs local to its GPUs
// (several GPUs on different NUMA nodes give the union), never narrower
// than its CPU request can use (then every online CPU). It skips pinned
// containers, containers without GPUs and GPUs whose CPU affinity is
// unknown. online is the node's online CPUs.
func Plan(inv gpu.Inventory, online []int, c Container) Decision {
	if c.Pinned {
		return Decision{Skip: "pinned by the kubelet's CPU manager"}
	}
	if len(c.GPUs) == 0 {
		return Decision{Skip: "no GPUs"}
	}
	var cpus []int
	for _, id := range c.GPUs {
		g := gpuOf(inv, id)
		if g == nil {
			return Decision{Skip: fmt.Sprintf("device %s is not in the inventory", id)}
		}
		if len(g.CPUAffinity) == 0 {
			return Decision{Skip: fmt.Sprintf("gpu %s has no known CPU affinity", g.UUID)}
		}
		cpus = append(cpus, g.CPUAffinity...)
	}
	slices.Sort(cpus)
	cpus = slices.Compact(cpus)
	if len(online) > 0 {
		cpus = slices.DeleteFunc(cpus, func(c int) bool { return !slices.Contains(online, c) })
	}
	all := slices.Clone(online)
	slices.Sort(all)
	if int64(len(cpus))*1000 < c.CPURequestMilli || len(cpus) == 0 {
		if len(all) == 0 {
			return Decision{Skip: "no online CPUs known"}
		}
		return Decision{CPUs: all, Widened: true}
	}
	return Decision{CPUs: cpus}
}

// gpuOf finds a GPU by its UUID or by one of its MIG devices' UUIDs.
func gpuOf(inv gpu.Inventory, uuid string) *gpu.GPU {
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if g.UUID == uuid {
			return g
		}
		for _, m := range g.MIGDevices {
			if m.UUID == uuid {
				return g
			}
		}
	}
	return nil
}

// Format writes CPUs in the kernel's list form ("0-55,112-167").
func Format(cpus []int) string {
	s := slices.Clone(cpus)
	slices.Sort(s)
	s = slices.Compact(s)
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Parse reads the kernel's list form ("0-3,8"); empty is no CPUs.
func Parse(s string) ([]int, error) {
	var out []int
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpuaffinity: cpu list %q: bad cpu %q", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpuaffinity: cpu list %q: bad range %q", s, part)
			}
		}
		if b-a > 1<<16 {
			return nil, fmt.Errorf("cpuaffinity: cpu list %q: range %q too wide", s, part)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}
