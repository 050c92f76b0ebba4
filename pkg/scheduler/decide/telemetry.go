package decide

import (
	"fmt"
	"strings"

	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// measure indexes the snapshot's telemetry on its view for the cycle's
// placements: nil without a telemetry listener (Snapshot.Telemetry nil).
func measure(cfg Config, s *plan.Snapshot) *view.Measured {
	if s.Telemetry == nil || s.View == nil {
		return nil
	}
	reports := make(map[string]map[string]view.DeviceReport, len(s.Telemetry))
	for node, t := range s.Telemetry {
		if t == nil {
			continue
		}
		devs := make(map[string]view.DeviceReport, len(t.Devices))
		for uuid, d := range t.Devices {
			devs[uuid] = view.DeviceReport{Unhealthy: d.Unhealthy, Reason: d.HealthReason, MemoryUsedBytes: d.MemoryUsedBytes}
		}
		reports[node] = devs
	}
	return s.View.Measure(reports, view.MeasureConfig{Overcommit: cfg.Overcommit, MarginPercent: cfg.OvercommitMarginPercent})
}

// measuredNow is the telemetry placements use now: without overcommit's
// room inside what-ifs that release running pods (see cycle.strict).
func (c *cycle) measuredNow() *view.Measured {
	if c.releasing > 0 && c.strict != nil {
		return c.strict
	}
	return c.measured
}

// maxNotes caps the devices or nodes one telemetry note names.
const maxNotes = 3

// telemetryNotes explains, for items that did not place, what telemetry
// changed on the nodes open to them: devices reported unhealthy ("gpu-3
// on node-a unhealthy (Xid 79, from telemetry)"); for fractions, GPUs
// whose tenants use more memory than they asked, and nodes without a
// stream, judged by requests alone. "" when nothing applies; otherwise
// each note is prefixed with "; ".
func (c *cycle) telemetryNotes(items []*view.Item, open func(*view.Node) bool) string {
	mig, frac := false, false
	for _, it := range items {
		mig = mig || it.Kind == view.MIG
		frac = frac || it.Kind == view.Fraction
	}
	var b strings.Builder
	isOpen := func(name string) bool {
		n := c.v.Node(name)
		return n != nil && open(n)
	}
	var down []string
	for _, d := range c.measured.Down() {
		if (d.MIG && !mig) || !isOpen(d.Node) {
			continue
		}
		down = append(down, fmt.Sprintf("%s on %s unhealthy (%s, from telemetry)", d.Device, d.Node, d.Reason))
	}
	note(&b, down, "")
	if !frac {
		return b.String()
	}
	var over []string
	for _, x := range c.measured.Excess() {
		if isOpen(x.Node) {
			over = append(over, fmt.Sprintf("%s on %s: tenants use %s of %s, asked %s", x.Device, x.Node,
				gibString(x.UsedBytes), gibString(x.MemoryBytes), gibString(x.RequestedBytes)))
		}
	}
	note(&b, over, " (from telemetry)")
	var blind []string
	for _, n := range c.v.Nodes() {
		if len(n.GPUs) > 0 && !c.measured.Reported(n.Name) && open(n) {
			blind = append(blind, n.Name)
		}
	}
	if len(blind) > 0 {
		b.WriteString("; no telemetry from ")
		b.WriteString(listCapped(blind, ", "))
		b.WriteString(": placed by requests only")
	}
	return b.String()
}

// note appends "; " and parts (at most maxNotes, then "and N more"),
// followed by suffix.
func note(b *strings.Builder, parts []string, suffix string) {
	if len(parts) == 0 {
		return
	}
	b.WriteString("; ")
	b.WriteString(listCapped(parts, "; "))
	b.WriteString(suffix)
}

func listCapped(parts []string, sep string) string {
	if len(parts) <= maxNotes {
		return strings.Join(parts, sep)
	}
	return fmt.Sprintf("%s and %d more", strings.Join(parts[:maxNotes], sep), len(parts)-maxNotes)
}

// gibString spells bytes in GiB: "40Gi", "12.5Gi".
func gibString(b int64) string {
	if b%(1<<30) == 0 {
		return fmt.Sprintf("%dGi", b>>30)
	}
	return fmt.Sprintf("%.1fGi", float64(b)/(1<<30))
}
