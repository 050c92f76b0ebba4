// Package memwatch is the agent's GPU memory watchdog: it compares each
// pod's GPU memory on a shared device (a replica or fraction of
// pkg/timeslice's sharing config) with its share's limit, and reports or
// kills the processes over it. It acts (lists processes, kills); the
// sharing model it checks against stays pure in pkg/timeslice.
package memwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/timeslice"
	"github.com/gpud/gpud/pkg/usage"
)

// Enforce is what the memory watchdog does about a share over its limit.
type Enforce string

// Enforcement modes, as --enforce-memory takes them.
const (
	EnforceOff    Enforce = "off"    // do not watch
	EnforceReport Enforce = "report" // log an event and count it
	EnforceKill   Enforce = "kill"   // report, then kill the share's processes, largest first, until it fits
)

// ParseEnforce parses an --enforce-memory value.
func ParseEnforce(s string) (Enforce, error) {
	switch e := Enforce(s); e {
	case EnforceOff, EnforceReport, EnforceKill:
		return e, nil
	}
	return "", fmt.Errorf("%q is not off, report or kill", s)
}

// The watchdog reads the same values every other consumer reads (see
// pkg/usage): the process list of pkg/discovery, the containers and pod
// names of pkg/procattr, the kubelet's assignments of pkg/podresources.
type (
	// GPUProcess is a process using memory on a GPU or MIG device.
	GPUProcess = usage.Process
	// ContainerRef is the container a process runs in.
	ContainerRef = usage.Container
	// PodName is a pod's namespace and name.
	PodName = usage.PodRef
	// Assignment is a container's devices as the kubelet's PodResources
	// API reports them.
	Assignment = usage.Assignment
)

// The watchdog's sources, small so tests can fake them.
type (
	// ProcessLister lists processes with their GPU memory (NVML).
	ProcessLister interface {
		GPUProcesses(ctx context.Context) ([]GPUProcess, error)
	}
	// ContainerLookup maps a pid to its container (cgroups).
	ContainerLookup interface {
		Lookup(pid uint32) (ContainerRef, error)
	}
	// PodNamer maps pod UIDs to names (the kubelet's pod log dirs).
	PodNamer interface {
		Pods() (map[string]PodName, error)
	}
	// AssignmentLister lists which containers hold which device IDs.
	AssignmentLister interface {
		List(ctx context.Context) ([]Assignment, error)
	}
)

// Violation is one pod using more memory on a shared device than its
// shares there allow.
type Violation struct {
	DeviceUUID string
	// Namespace and Pod name the holder; empty when the processes' pod is
	// not known, then the limit is the largest share anyone holds there.
	Namespace, Pod string
	PodUID         string
	PIDs           []uint32
	UsedBytes      uint64
	LimitBytes     uint64
}

func (v Violation) key() string { return v.DeviceUUID + "/" + v.PodUID }

// MinWatchdogInterval is the shortest watchdog interval: each check lists
// every process on every GPU, so shorter periods only burn CPU.
const MinWatchdogInterval = 100 * time.Millisecond

// WatchdogConfig configures a Watchdog. Processes, Containers and
// Assignments are required; Pods may be nil (limits are then matched by
// device only). Kill is called in kill mode; tests pass a fake.
type WatchdogConfig struct {
	Mode     Enforce
	Interval time.Duration // zero means 10s; at least MinWatchdogInterval
	Sharing  func() timeslice.Config
	// Inventory resolves GPU index keys and device memory (for replicas
	// with LimitMemory); nil means UUID keys only and no memory split.
	Inventory   func() gpu.Inventory
	Processes   ProcessLister
	Containers  ContainerLookup
	Pods        PodNamer
	Assignments AssignmentLister
	Kill        func(pid uint32) error
	// OnViolation is told each violation once, when it begins (what the
	// log's warning says), with the mode; OnKill each process killed, with
	// its own memory. Both are for Kubernetes Events, called on Check's
	// goroutine, and must not block; nil means nobody is told.
	OnViolation func(v Violation, mode Enforce)
	OnKill      func(v Violation, pid uint32, procBytes uint64)
	Log         *slog.Logger
}

// Watchdog compares each pod's GPU memory on shared devices against its
// shares' memory limits. It gives unequal fractions a real limit without
// intercepting CUDA.
type Watchdog struct {
	cfg WatchdogConfig

	mu         sync.Mutex
	active     map[string]Violation
	violations uint64
	kills      uint64
}

// NewWatchdog checks cfg and returns a watchdog.
func NewWatchdog(cfg WatchdogConfig) (*Watchdog, error) {
	var errs []error
	if _, err := ParseEnforce(string(cfg.Mode)); err != nil {
		errs = append(errs, err)
	}
	if cfg.Mode != EnforceOff && (cfg.Processes == nil || cfg.Containers == nil || cfg.Assignments == nil || cfg.Sharing == nil) {
		errs = append(errs, errors.New("memwatch: watchdog needs Processes, Containers, Assignments and Sharing"))
	}
	if cfg.Mode == EnforceKill && cfg.Kill == nil {
		errs = append(errs, errors.New("memwatch: watchdog in kill mode needs Kill"))
	}
	if cfg.Interval < 0 || (cfg.Interval > 0 && cfg.Interval < MinWatchdogInterval) {
		errs = append(errs, fmt.Errorf("memwatch: watchdog interval %s: want at least %s", cfg.Interval, MinWatchdogInterval))
	}
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Inventory == nil {
		cfg.Inventory = func() gpu.Inventory { return gpu.Inventory{} }
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Watchdog{cfg: cfg, active: map[string]Violation{}}, errors.Join(errs...)
}

// Run checks every Interval until ctx ends; in off mode it only waits.
// Check errors are logged and retried at the next tick.
func (w *Watchdog) Run(ctx context.Context) error {
	if w.cfg.Mode == EnforceOff {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		// A failure is logged once per outage, not once per interval.
		switch _, err := w.Check(ctx); {
		case err != nil && !failing:
			w.cfg.Log.Warn("memory watchdog check failed, retrying quietly", "err", err)
			failing = true
		case err != nil:
			w.cfg.Log.Debug("memory watchdog check failed", "err", err)
		case failing:
			w.cfg.Log.Info("memory watchdog checks again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Counts returns the violations seen (each counted once while it lasts)
// and the processes killed, since start.
func (w *Watchdog) Counts() (violations, kills uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.violations, w.kills
}

// Active returns the violations found by the last check.
func (w *Watchdog) Active() []Violation {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Violation, 0, len(w.active))
	for _, v := range w.active {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

// Check runs one pass: it finds the violations, reports new ones, and in
// kill mode kills processes of each violating pod, largest first, until
// the rest fits the limit.
func (w *Watchdog) Check(ctx context.Context) ([]Violation, error) {
	if w.cfg.Mode == EnforceOff || !w.cfg.Sharing().HasMemoryLimits() {
		w.mu.Lock()
		w.active = nil
		w.mu.Unlock()
		return nil, nil // nothing has a limit to enforce
	}
	vs, procs, err := w.find(ctx)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	now := map[string]Violation{}
	var fresh []Violation
	for _, v := range vs {
		if _, seen := w.active[v.key()]; !seen {
			w.violations++
			fresh = append(fresh, v)
		}
		now[v.key()] = v
	}
	w.active = now
	w.mu.Unlock()
	for _, v := range fresh {
		w.cfg.Log.Warn("gpu memory over share limit", "device_uuid", v.DeviceUUID, "namespace", v.Namespace, "pod", v.Pod,
			"pod_uid", v.PodUID, "pids", v.PIDs, "used_bytes", v.UsedBytes, "limit_bytes", v.LimitBytes, "mode", string(w.cfg.Mode))
		if w.cfg.OnViolation != nil {
			w.cfg.OnViolation(v, w.cfg.Mode)
		}
	}
	if w.cfg.Mode == EnforceKill {
		for _, v := range vs {
			w.enforce(v, procs)
		}
	}
	return vs, nil
}

// enforce kills v's processes, largest first, until the rest fits.
func (w *Watchdog) enforce(v Violation, procs map[uint32]GPUProcess) {
	pids := append([]uint32(nil), v.PIDs...)
	sort.Slice(pids, func(i, j int) bool { return procs[pids[i]].UsedBytes > procs[pids[j]].UsedBytes })
	used := v.UsedBytes
	for _, pid := range pids {
		if used <= v.LimitBytes {
			return
		}
		if err := w.cfg.Kill(pid); err != nil {
			w.cfg.Log.Warn("kill over-limit process failed", "pid", pid, "device_uuid", v.DeviceUUID, "err", err)
			continue
		}
		w.mu.Lock()
		w.kills++
		w.mu.Unlock()
		used -= procs[pid].UsedBytes
		w.cfg.Log.Warn("killed over-limit process", "pid", pid, "device_uuid", v.DeviceUUID, "namespace", v.Namespace, "pod", v.Pod,
			"used_bytes", procs[pid].UsedBytes, "limit_bytes", v.LimitBytes)
		if w.cfg.OnKill != nil {
			w.cfg.OnKill(v, pid, procs[pid].UsedBytes)
		}
	}
}

// holding is a pod's shares of one device.
type holding struct {
	ns, pod    string
	limitBytes uint64 // 0: unlimited
}

// find computes the violations and returns the processes by pid.
func (w *Watchdog) find(ctx context.Context) ([]Violation, map[uint32]GPUProcess, error) {
	procs, err := w.cfg.Processes.GPUProcesses(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("memwatch: watchdog processes: %w", err)
	}
	as, err := w.cfg.Assignments.List(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("memwatch: watchdog pod resources: %w", err)
	}
	var names map[string]PodName
	if w.cfg.Pods != nil {
		if names, err = w.cfg.Pods.Pods(); err != nil {
			w.cfg.Log.Debug("pod names unavailable, matching limits by device", "err", err)
		}
	}
	holders := w.holdings(as)
	type group struct {
		v     Violation
		known bool
	}
	groups := map[string]*group{}
	byPID := map[uint32]GPUProcess{}
	for _, p := range procs {
		hs := holders[p.DeviceUUID]
		if len(hs) == 0 {
			continue // not a shared device: nothing to enforce
		}
		c, err := w.cfg.Containers.Lookup(p.PID)
		if err != nil || c.PodUID == "" {
			continue // not in a pod: not the watchdog's business
		}
		byPID[p.PID] = p
		k := p.DeviceUUID + "/" + c.PodUID
		g := groups[k]
		if g == nil {
			g = &group{v: Violation{DeviceUUID: p.DeviceUUID, PodUID: c.PodUID}}
			if n, ok := names[c.PodUID]; ok {
				g.v.Namespace, g.v.Pod, g.known = n.Namespace, n.Name, true
			}
			groups[k] = g
		}
		g.v.PIDs = append(g.v.PIDs, p.PID)
		g.v.UsedBytes += p.UsedBytes
	}
	var out []Violation
	for _, g := range groups {
		limit, ok := limitFor(holders[g.v.DeviceUUID], g.v.Namespace, g.v.Pod, g.known)
		if !ok || g.v.UsedBytes <= limit {
			continue
		}
		if !g.known && len(holders[g.v.DeviceUUID]) == 1 {
			g.v.Namespace, g.v.Pod = holders[g.v.DeviceUUID][0].ns, holders[g.v.DeviceUUID][0].pod
		}
		g.v.LimitBytes = limit
		sort.Slice(g.v.PIDs, func(i, j int) bool { return g.v.PIDs[i] < g.v.PIDs[j] })
		out = append(out, g.v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out, byPID, nil
}

// limitFor is the pod's memory limit on a device: the sum of its shares
// when the pod is known, else the largest any holder has (so a pod over
// it is over whatever it holds). ok is false when there is no limit.
func limitFor(hs []holding, ns, pod string, known bool) (uint64, bool) {
	var limit uint64
	found := false
	for _, h := range hs {
		if known && (h.ns != ns || h.pod != pod) {
			continue
		}
		if h.limitBytes == 0 {
			return 0, false
		}
		if known {
			limit += h.limitBytes
		} else {
			limit = max(limit, h.limitBytes)
		}
		found = true
	}
	return limit, found
}

// holdings maps each shared device to the pods holding its shares.
func (w *Watchdog) holdings(as []Assignment) map[string][]holding {
	cfg := w.cfg.Sharing()
	inv := w.cfg.Inventory()
	type key struct{ dev, ns, pod string }
	sum := map[key]uint64{}
	unlimited := map[key]bool{}
	var order []key
	for _, a := range as {
		for _, id := range a.DeviceIDs {
			uuid, n, ok := timeslice.ParseReplicaID(id)
			if !ok {
				continue
			}
			index, memMiB := timeslice.DeviceOf(inv, uuid)
			sh, shared := cfg.For(uuid, index)
			if !shared {
				continue
			}
			share, err := sh.ShareOf(n, memMiB)
			if err != nil {
				continue
			}
			k := key{uuid, a.Namespace, a.Pod}
			if _, seen := sum[k]; !seen {
				order = append(order, k)
			}
			sum[k] += share.LimitMiB() << 20 // borrowing up to the limit is allowed
			unlimited[k] = unlimited[k] || share.MemoryMiB == 0
		}
	}
	out := map[string][]holding{}
	for _, k := range order {
		limit := sum[k]
		if unlimited[k] {
			limit = 0
		}
		out[k.dev] = append(out[k.dev], holding{ns: k.ns, pod: k.pod, limitBytes: limit})
	}
	return out
}

// String formats a violation for messages.
func (v Violation) String() string {
	who := v.PodUID
	if v.Pod != "" {
		who = v.Namespace + "/" + v.Pod
	}
	pids := make([]string, len(v.PIDs))
	for i, p := range v.PIDs {
		pids[i] = fmt.Sprint(p)
	}
	return fmt.Sprintf("%s on %s uses %d MiB, limit %d MiB (pids %s)", who, v.DeviceUUID, v.UsedBytes>>20, v.LimitBytes>>20, strings.Join(pids, ","))
}
