package memlimit

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Modes are every [Mode], strongest first.
var Modes = []Mode{ModeDriver, ModeMPS, ModeWatchdog}

// Status is the /readyz line: each mode in use with the GPUs (by index)
// in it and why, GPUs with the same mode and reason together. Modes are
// decided at [New], so the line does not change while the agent runs.
func (m *Manager) Status() string {
	if len(m.decisions) == 0 {
		return "memory limits: no GPUs"
	}
	type group struct {
		mode   Mode
		reason string
		gpus   []int
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, d := range m.decisions {
		k := string(d.Mode) + "\x00" + d.Reason
		g := byKey[k]
		if g == nil {
			g = &group{mode: d.Mode, reason: d.Reason}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.gpus = append(g.gpus, d.Index)
	}
	rank := map[Mode]int{}
	for i, md := range Modes {
		rank[md] = i
	}
	sort.SliceStable(groups, func(i, j int) bool { return rank[groups[i].mode] < rank[groups[j].mode] })
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		sort.Ints(g.gpus)
		idx := make([]string, len(g.gpus))
		for i, n := range g.gpus {
			idx[i] = strconv.Itoa(n)
		}
		noun := "GPU"
		if len(idx) > 1 {
			noun = "GPUs"
		}
		parts = append(parts, fmt.Sprintf("%s on %s %s (%s)", g.mode, noun, strings.Join(idx, ","), g.reason))
	}
	return "memory limits: " + strings.Join(parts, "; ")
}

// Register adds gpud_memory_limit_mode to reg: per GPU (labels gpu, its
// NVML index, and UUID, as dcgm-exporter names them), 1 for the mode it
// is in and 0 for the others, so an alert can match on a GPU that left
// driver enforcement. The reason is in /readyz and the agent's log.
func (m *Manager) Register(reg prometheus.Registerer) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpud_memory_limit_mode",
		Help: "How a fraction's GPU memory is enforced on the GPU: 1 for its mode (driver: per-cgroup limits the driver enforces, r615+; mps: MPS pinned-memory limits and the watchdog; watchdog: the watchdog alone), 0 for the others.",
	}, []string{"gpu", "UUID", "mode"})
	for _, d := range m.decisions {
		for _, md := range Modes {
			v := 0.0
			if md == d.Mode {
				v = 1
			}
			g.WithLabelValues(strconv.Itoa(d.Index), d.UUID, string(md)).Set(v)
		}
	}
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("memlimit: register metrics: %w", err)
	}
	return nil
}
