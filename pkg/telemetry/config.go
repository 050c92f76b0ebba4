// Package telemetry samples NVML in the background into a cache and serves
// it as Prometheus metrics: dcgm-exporter's DCGM_FI_DEV_* names, units and
// labels (so existing dashboards and alerts work unchanged), its
// DCGM_FI_PROF_* profiling names through NVML GPM on GPUs that have it
// (Hopper and later; per GPU and per MIG instance, see gpm.go), and gpud_*
// metrics for what DCGM lacks (health, MIG layout, shares, per-process
// memory by pod and container, the sampler's own health).
//
// A scrape never calls NVML: [Sampler.Run] reads every GPU and MIG device
// each Interval, one goroutine per NVML call, and publishes an immutable
// [Snapshot]; [Collector] reads the latest one. A slow or failing call
// leaves that field stale (dropped from the output, counted in
// gpud_sampler_errors_total), never the scrape.
//
// The sampler opens no NVML stream of its own beyond its timed reads:
// processes are read with pkg/discovery's reader (per GPU, inside the
// sweep's timeouts) and Xids arrive from discovery's event pump through
// [Sampler.RecordXid]. Pod attribution uses the kubelet PodResources API
// (pkg/podresources) and /proc/<pid>/cgroup (pkg/procattr). The package creates no hardware handle
// and opens no root of its own: cmd/gpud passes them in.
package telemetry

import (
	"errors"
	"fmt"
	"time"
)

// Compat selects which device metric names a [Collector] exports.
type Compat string

// Compat values: dcgm-exporter's names only, gpud's native names (units in
// names, base units) only, or both. gpud_* metrics that DCGM has no
// equivalent for are exported in every mode.
const (
	CompatDCGM   Compat = "dcgm"
	CompatNative Compat = "native"
	CompatBoth   Compat = "both"
)

// ParseCompat parses a --metrics-compat value.
func ParseCompat(s string) (Compat, error) {
	switch c := Compat(s); c {
	case CompatDCGM, CompatNative, CompatBoth:
		return c, nil
	}
	return "", fmt.Errorf("%q is not dcgm, native or both", s)
}

func (c Compat) dcgm() bool   { return c == CompatDCGM || c == CompatBoth || c == "" }
func (c Compat) native() bool { return c == CompatNative || c == CompatBoth }

// MinInterval is the shortest sampling interval a [Config] accepts.
const MinInterval = 10 * time.Millisecond

// Config configures a [Sampler]. Zero values mean the documented defaults.
type Config struct {
	// Interval is how often every device is sampled (default 5s).
	Interval time.Duration
	// CallTimeout is how long a sweep waits for NVML calls before it
	// counts the ones still running as timed out and publishes without
	// them (default Interval/2). A timed-out call keeps running; its
	// field is skipped (counted as busy) until it returns.
	CallTimeout time.Duration
	// StaleAfter is the age beyond which a field is stale and left out of
	// the metrics (default 3*Interval).
	StaleAfter time.Duration
	// PodResourcesTimeout bounds one PodResources List (default 2s).
	PodResourcesTimeout time.Duration
	// Hostname is the Hostname label of every device series (cmd/gpud
	// passes the node name).
	Hostname string
	// Clock is the time source for timestamps and staleness (default
	// time.Now); tests pass the simulated node's fixed clock.
	Clock func() time.Time
}

// withDefaults fills the zero values.
func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = 5 * time.Second
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = c.Interval / 2
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = 3 * c.Interval
	}
	if c.PodResourcesTimeout == 0 {
		c.PodResourcesTimeout = 2 * time.Second
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c
}

// Validate reports every invalid setting.
func (c Config) Validate() error {
	var errs []error
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("telemetry: interval %s: must not be negative", c.Interval))
	}
	if c.Interval > 0 && c.Interval < MinInterval {
		errs = append(errs, fmt.Errorf("telemetry: interval %s: want at least %s", c.Interval, MinInterval))
	}
	if c.CallTimeout < 0 {
		errs = append(errs, fmt.Errorf("telemetry: call timeout %s: must not be negative", c.CallTimeout))
	}
	if c.StaleAfter < 0 {
		errs = append(errs, fmt.Errorf("telemetry: stale-after %s: must not be negative", c.StaleAfter))
	}
	return errors.Join(errs...)
}
