package decide

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// measure indexes the snapshot's telemetry on its view for the cycle's
// placements: nil without a telemetry listener (Snapshot.Telemetry nil).
func measure(cfg Config, s *plan.Snapshot) *view.Measured {
	if s.Telemetry == nil || s.View == nil {
		return nil
	}
	// Running pods' claims tell the view which tenants borrow (use above
	// their requests what the driver takes back first).
	var claims []*resourceapi.ResourceClaim
	for _, p := range s.Bound {
		claims = append(claims, p.Claims...)
	}
	return s.View.Measure(s.Telemetry, view.MeasureConfig{Overcommit: cfg.Overcommit, MarginPercent: cfg.OvercommitMarginPercent, Claims: claims})
}

// measuredState is the snapshot's telemetry as the cycle's placements
// use it: measured (nil without a telemetry listener) and, with
// overcommit, strict, the same without overcommit's room. What-ifs that
// release running pods count them in releasing and place against strict
// meanwhile: a released pod's measured use is not known per pod, so
// overcommit's room is not credited there.
type measuredState struct {
	measured, strict *view.Measured
	// releasing counts the running pods (or victims) what-ifs under way
	// have released.
	releasing int
}

// newMeasuredState measures s's telemetry for cfg (strict only with
// overcommit on).
func newMeasuredState(cfg Config, s *plan.Snapshot) measuredState {
	m := measuredState{measured: measure(cfg, s)}
	if cfg.Overcommit && m.measured != nil {
		strict := cfg
		strict.Overcommit = false
		m.strict = measure(strict, s)
	}
	return m
}

// on reports whether the cycle has telemetry.
func (m *measuredState) on() bool { return m.measured != nil }

// now is the telemetry placements use now: without overcommit's room
// inside what-ifs that release running pods.
func (m *measuredState) now() *view.Measured {
	if m.releasing > 0 && m.strict != nil {
		return m.strict
	}
	return m.measured
}

// enter and leave bracket a what-if that releases n running pods or
// victims (their claims through release and hold).
func (m *measuredState) enter(n int) { m.releasing += n }
func (m *measuredState) leave(n int) { m.releasing -= n }

// release takes running pods' claims out of the measurements for a
// what-if without them; hold puts them back.
func (m *measuredState) release(allocs []view.Allocation) {
	m.measured.Release(allocs...)
	m.strict.Release(allocs...)
}

func (m *measuredState) hold(allocs []view.Allocation) {
	m.measured.Hold(allocs...)
	m.strict.Hold(allocs...)
}

// borrowNote says which borrowers the driver will evict to give allocs'
// fractions their memory (view.Measured.Evicts), as measured before this
// cycle's other placements; "" when none.
func (m *measuredState) borrowNote(allocs []view.Allocation) string {
	var b capped
	for _, a := range allocs {
		if a.Result == nil {
			continue
		}
		for _, r := range a.Result.Devices.Results {
			if r.Driver != view.DriverName || r.ShareID == nil {
				continue
			}
			q := r.ConsumedCapacity[view.CapacityMemory]
			if e := m.measured.Evicts(r.Pool, r.Device, q.Value()); e > 0 {
				b.add(func() string { return fmt.Sprintf("%s on %s: up to %s", r.Device, r.Pool, gibString(e)) })
			}
		}
	}
	var out strings.Builder
	b.write(&out, "the driver evicts borrowers (tenants above their memory request) to give this pod its memory: ", "; ", " (from telemetry)")
	return out.String()
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
	var down capped
	for _, d := range c.tel.measured.Down() {
		if (!d.MIG || mig) && isOpen(d.Node) {
			down.add(func() string {
				return fmt.Sprintf("%s on %s unhealthy (%s, from telemetry)", d.Device, d.Node, d.Reason)
			})
		}
	}
	down.write(&b, "; ", "; ", "")
	if !frac {
		return b.String()
	}
	var over capped
	for _, x := range c.tel.measured.Excess() {
		if isOpen(x.Node) {
			over.add(func() string {
				return fmt.Sprintf("%s on %s: tenants use %s of %s, asked %s", x.Device, x.Node,
					gibString(x.UsedBytes), gibString(x.MemoryBytes), gibString(x.RequestedBytes))
			})
		}
	}
	over.write(&b, "; ", "; ", " (from telemetry)")
	var blind capped
	for _, n := range c.v.Nodes() {
		if len(n.GPUs) > 0 && !c.tel.measured.Reported(n.Name) && open(n) {
			blind.add(func() string { return n.Name })
		}
	}
	blind.write(&b, "; no telemetry from ", ", ", ": placed by requests only")
	return b.String()
}

// capped collects up to maxNotes parts of a note, formatted only if shown,
// and counts the rest.
type capped struct {
	parts []string
	n     int
}

func (c *capped) add(f func() string) {
	if c.n++; c.n <= maxNotes {
		c.parts = append(c.parts, f())
	}
}

// write appends, if there is a part, lead, the parts joined by sep, "and N
// more" for the rest, then suffix.
func (c *capped) write(b *strings.Builder, lead, sep, suffix string) {
	if c.n == 0 {
		return
	}
	b.WriteString(lead)
	b.WriteString(strings.Join(c.parts, sep))
	if c.n > maxNotes {
		fmt.Fprintf(b, " and %d more", c.n-maxNotes)
	}
	b.WriteString(suffix)
}

// gibString spells bytes in GiB: "40Gi", "12.5Gi".
func gibString(b int64) string {
	if b%(1<<30) == 0 {
		return fmt.Sprintf("%dGi", b>>30)
	}
	return fmt.Sprintf("%.1fGi", float64(b)/(1<<30))
}
