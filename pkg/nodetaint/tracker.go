package nodetaint

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// TaintKey is the Node taint of a node whose GPUs keep failing.
const TaintKey = "gpu.gpud.io/unhealthy-node"

// ReasonAnnotation on the Node says why it is tainted.
const ReasonAnnotation = "gpud.io/unhealthy-node-reason"

// Taint values: why the node is tainted.
const (
	ValueRepeated = "gpu-failed-again"
	ValueMultiple = "gpus-failed"
)

// Defaults of [Config] fields left zero.
const (
	DefaultWindow     = 24 * time.Hour
	DefaultMaxGPUs    = 2
	DefaultClearAfter = 30 * time.Minute
)

// Config tunes a [Tracker]; zero values take the defaults.
type Config struct {
	// Window is how far back failures count: a GPU failing again within
	// it after recovering, or MaxGPUs distinct GPUs failing within it,
	// taint the node. Default [DefaultWindow], 1m to 30 days.
	Window time.Duration
	// MaxGPUs is how many distinct GPUs failing within Window taint the
	// node; default [DefaultMaxGPUs], 1 to 1024.
	MaxGPUs int
	// ClearAfter is how long every GPU must stay healthy before the taint
	// goes; default [DefaultClearAfter], 1m to 7 days.
	ClearAfter time.Duration
	// NoExecuteAfter, if set, adds the NoExecute taint (same key and
	// value) once the node has carried the NoSchedule taint that long with
	// a GPU still unhealthy, so that the pods left on it are evicted too
	// (those that do not tolerate it); both go together when the GPUs stay
	// healthy for ClearAfter. 0 (the default) never adds it; else 1m to 7
	// days.
	NoExecuteAfter time.Duration
}

func (c Config) withDefaults() Config {
	c.Window = cmp.Or(c.Window, DefaultWindow)
	c.MaxGPUs = cmp.Or(c.MaxGPUs, DefaultMaxGPUs)
	c.ClearAfter = cmp.Or(c.ClearAfter, DefaultClearAfter)
	return c
}

// Validate reports every bad field (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Window < time.Minute || c.Window > 30*24*time.Hour {
		errs = append(errs, fmt.Errorf("nodetaint: window %s: want 1m to 720h", c.Window))
	}
	if c.MaxGPUs < 1 || c.MaxGPUs > 1024 {
		errs = append(errs, fmt.Errorf("nodetaint: max GPUs %d: want 1 to 1024", c.MaxGPUs))
	}
	if c.ClearAfter < time.Minute || c.ClearAfter > 7*24*time.Hour {
		errs = append(errs, fmt.Errorf("nodetaint: clear after %s: want 1m to 168h", c.ClearAfter))
	}
	if c.NoExecuteAfter != 0 && (c.NoExecuteAfter < time.Minute || c.NoExecuteAfter > 7*24*time.Hour) {
		errs = append(errs, fmt.Errorf("nodetaint: NoExecute after %s: want 0 (never) or 1m to 168h", c.NoExecuteAfter))
	}
	return errors.Join(errs...)
}

// GPU is one GPU's health as observed.
type GPU struct {
	UUID      string
	Unhealthy bool
	Reason    string
}

// Taint is the taint the node should carry; Value "" means none.
// NoExecute adds the NoExecute taint of the same key and value beside the
// NoSchedule one.
type Taint struct {
	Value, Reason string
	NoExecute     bool
}

// Tracker turns GPU health over time into the node's taint. Make it with
// [NewTracker]; not safe for concurrent use.
type Tracker struct {
	cfg  Config
	gpus map[string]*gpuState
	// taint is the current decision; lastBad when a GPU was last seen
	// unhealthy (or the taint was set).
	taint   Taint
	lastBad time.Time
	// since is when the taint was set (or resumed).
	since time.Time
	// anyBad: a GPU was unhealthy at the last observation.
	anyBad bool
}

type gpuState struct {
	unhealthy bool
	// recovered: it failed and became healthy again.
	recovered bool
	// failures are when it turned unhealthy, within the window.
	failures []time.Time
	reason   string
}

// NewTracker returns a Tracker for cfg, or cfg's problems.
func NewTracker(cfg Config) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Tracker{cfg: cfg.withDefaults(), gpus: map[string]*gpuState{}}, nil
}

// Resume takes over a taint found on the node (an agent restart): it
// holds until the GPUs stay healthy for ClearAfter from now.
func (t *Tracker) Resume(tn Taint, now time.Time) {
	if tn.Value == "" || t.taint.Value != "" {
		return
	}
	t.taint, t.lastBad, t.since = tn, now, now
}

// Observe records the GPUs' health at now and returns the taint the node
// should carry. GPUs absent from gpus are forgotten.
func (t *Tracker) Observe(gpus []GPU, now time.Time) Taint {
	seen := make(map[string]bool, len(gpus))
	var repeated, multiple []string
	anyBad := false
	for _, g := range gpus {
		seen[g.UUID] = true
		s := t.gpus[g.UUID]
		if s == nil {
			s = &gpuState{}
			t.gpus[g.UUID] = s
		}
		s.failures = slices.DeleteFunc(s.failures, func(at time.Time) bool { return now.Sub(at) > t.cfg.Window })
		switch {
		case g.Unhealthy && !s.unhealthy:
			if s.recovered && len(s.failures) > 0 {
				repeated = append(repeated, fmt.Sprintf("GPU %s failed again after recovering (%s)", g.UUID, cmp.Or(g.Reason, "unhealthy")))
			}
			s.failures = append(s.failures, now)
			s.reason = cmp.Or(g.Reason, "unhealthy")
		case !g.Unhealthy && s.unhealthy:
			s.recovered = true
		}
		s.unhealthy = g.Unhealthy
		anyBad = anyBad || g.Unhealthy
	}
	for u := range t.gpus {
		if !seen[u] {
			delete(t.gpus, u)
		}
	}
	var failed []string
	for _, u := range slices.Sorted(maps.Keys(t.gpus)) {
		if s := t.gpus[u]; len(s.failures) > 0 {
			failed = append(failed, u+" ("+s.reason+")")
		}
	}
	if len(failed) >= t.cfg.MaxGPUs {
		multiple = append(multiple, fmt.Sprintf("%d GPUs failed within %s: %s", len(failed), t.cfg.Window, strings.Join(failed, ", ")))
	}
	if anyBad {
		t.lastBad = now
	}
	t.anyBad = anyBad
	if t.taint.Value == "" {
		t.since = now
	}
	switch {
	case len(repeated) > 0:
		t.taint, t.lastBad = Taint{Value: ValueRepeated, Reason: strings.Join(repeated, "; "), NoExecute: t.taint.NoExecute}, now
	case len(multiple) > 0 && t.taint.Value == "":
		t.taint, t.lastBad = Taint{Value: ValueMultiple, Reason: multiple[0]}, now
	case t.taint.Value != "" && !anyBad && now.Sub(t.lastBad) >= t.cfg.ClearAfter:
		t.taint = Taint{}
		// What made the taint is history now: a new count starts.
		for _, s := range t.gpus {
			s.failures, s.recovered = nil, false
		}
	}
	if t.noExecuteDue() && !now.Before(t.since.Add(t.cfg.NoExecuteAfter)) {
		t.taint.NoExecute = true
	}
	return t.taint
}

// noExecuteDue reports whether the NoExecute step waits to be taken: it
// is on, the node is tainted NoSchedule alone, and a GPU is unhealthy.
func (t *Tracker) noExecuteDue() bool {
	return t.cfg.NoExecuteAfter > 0 && t.taint.Value != "" && !t.taint.NoExecute && t.anyBad
}

// Next is when the taint may clear if the GPUs stay healthy, or, with a
// GPU unhealthy, when the NoExecute step is due (zero when there is no
// taint, or a GPU is unhealthy and no step is due): the caller observes
// again then.
func (t *Tracker) Next() time.Time {
	if t.taint.Value == "" {
		return time.Time{}
	}
	if t.noExecuteDue() {
		return t.since.Add(t.cfg.NoExecuteAfter)
	}
	for _, s := range t.gpus {
		if s.unhealthy {
			return time.Time{}
		}
	}
	return t.lastBad.Add(t.cfg.ClearAfter)
}
