// Package enforce makes the node enforce what the kubelet allocated, for
// every container as it appears: it watches the pod cgroup tree (polling,
// at most 1s) and the kubelet's PodResources, and attaches a device filter
// (pkg/devcgroup: eBPF on cgroup v2, devices.deny on v1) that lets the
// container open only its GPUs, MIG caps, nvidiactl and nvidia-uvm; with
// cpu affinity on, it writes the container's cpuset on its GPUs' NUMA
// node(s) (pkg/cpuaffinity). Filters follow allocation changes and are
// released when the container's cgroup goes.
//
// In DRA mode ([Config.DRA]) a container's GPUs are the devices of driver
// gpu.gpud.io that the kubelet lists for it (gpu-<index>, whole or a
// fraction; gpu-<index>-mig-<profile>-<start>), matched by name against
// the inventory; a name the inventory does not have grants nothing. A
// kubelet that does not fill PodResources' dynamic_resources is detected
// (the driver prepared claims the kubelet never mentions): then containers
// of the claims' namespaces are not filtered when they appear, since one
// of them may hold a GPU nobody can see, and Status says so.
//
// With [Config.MemoryLimits], a container holding fractions of whole GPUs
// (device plugin replicas with a memory share, DRA devices that are
// fractions) gets the driver's per-cgroup GPU memory limits on the GPUs
// whose driver has them (pkg/memlimit), set when the runtime starts it
// and cleared when it goes; see [Enforcer.ContainerStarting] for what a
// failure does.
//
// Containers are named through the kubelet's log links (pod UID and
// container ID from the cgroup path, names from /var/log/pods and
// /var/log/containers); a container not named yet is given its pod's
// devices, never more. A container of a pod the kubelet does not know is
// left alone, and so is every container while PodResources does not
// answer (no allocation is known then).
//
// It reads and writes only under the roots in its [Config].
package enforce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpud/gpud/pkg/cpuaffinity"
	"github.com/gpud/gpud/pkg/devcgroup"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/memlimit"
	"github.com/gpud/gpud/pkg/timeslice"
	"github.com/gpud/gpud/pkg/usage"
)

// DefaultInterval is how often the pod cgroup tree is read.
const DefaultInterval = 500 * time.Millisecond

// MaxInterval is the slowest allowed: a container is filtered within this
// long of its cgroup appearing.
const MaxInterval = time.Second

// Allocations lists the kubelet's device assignments
// (*podresources.Client). List must fail, not return none, when the
// kubelet cannot be asked: enforcement pauses then rather than taking
// every container's GPUs away.
type Allocations interface {
	List(ctx context.Context) ([]usage.Assignment, error)
}

// Pods maps pod UIDs to names (procattr.PodLogs).
type Pods interface {
	Pods() (map[string]usage.PodRef, error)
}

// Containers maps container IDs to names ([ContainerLogs]).
type Containers interface {
	Containers() (map[string]ContainerRef, error)
}

// Config is the enforcer's wiring. Zero values are documented per field.
type Config struct {
	// Unified is the cgroup2 mount (empty: none); V1Devices the cgroup v1
	// devices hierarchy (empty: none). Containers are looked for under
	// both.
	Unified, V1Devices string
	// Isolate turns device filters on.
	Isolate bool
	// Majors are the nvidia-uvm and nvidia-caps majors (/proc/devices).
	Majors devcgroup.Majors
	// Probe says whether eBPF device filters work here; nil means
	// [devcgroup.Probe]. When it fails, cgroup v1 is used where the
	// container has a devices cgroup, and nothing elsewhere.
	Probe func() error
	// CPUs writes cpusets; nil leaves cpusets alone (--cpu-affinity off).
	CPUs *cpuaffinity.Writer
	// CPURoot is the hierarchy holding cpu.shares or cpu.weight and the
	// CPU quota (cgroup2 with the cpu controller, or the v1 cpu mount).
	CPURoot string
	// OnlineCPUs are the node's online CPUs (/sys/devices/system/cpu/online).
	OnlineCPUs []int
	// Interval is the poll period; 0 means [DefaultInterval].
	Interval time.Duration

	Inventory func() gpu.Inventory
	// Allocations lists device plugin assignments; unused when DRA is
	// set.
	Allocations Allocations
	// DRA, set with --kubelet-api dra, makes claims' devices of the
	// gpu.gpud.io driver allocations too; nil: device plugin assignments
	// only.
	DRA        *DRA
	Pods       Pods
	Containers Containers

	// MemoryLimits sets each container's driver-enforced GPU memory limits
	// from its fractions (see [Enforcer.ContainerStarting]); nil leaves GPU
	// memory to MPS and the watchdog. It needs Unified: the driver names a
	// container by its cgroup2 directory.
	MemoryLimits MemoryLimits
	// Sharing is the device plugin's sharing config, which gives a
	// replica its memory share; nil: device plugin replicas get no
	// memory limits. Unused for DRA devices.
	Sharing func() timeslice.Config
	// Metrics records memory limit sets and failures; nil records nothing.
	Metrics *Metrics
	// Events is told memory limit sets and failures (Kubernetes Events);
	// nil tells nobody.
	Events LimitEvents
}

// Validate checks the config.
func (c Config) Validate() error {
	var errs []error
	if c.Interval < 0 || c.Interval > MaxInterval {
		errs = append(errs, fmt.Errorf("enforce: interval %s: want (0, %s]", c.Interval, MaxInterval))
	}
	if c.Inventory == nil || (c.Allocations == nil && c.DRA == nil) || c.Pods == nil || c.Containers == nil {
		errs = append(errs, errors.New("enforce: Inventory, Allocations (or DRA), Pods and Containers are required"))
	}
	if c.MemoryLimits != nil && c.Unified == "" {
		errs = append(errs, errors.New("enforce: MemoryLimits needs the cgroup2 mount (Unified)"))
	}
	if c.DRA != nil && c.DRA.Resources == nil {
		errs = append(errs, errors.New("enforce: DRA.Resources is required"))
	}
	if c.Unified == "" && c.V1Devices == "" && c.CPUs == nil {
		errs = append(errs, errors.New("enforce: no cgroup hierarchy to watch"))
	}
	return errors.Join(errs...)
}

// filter is an attached device filter of either kind.
type filter interface {
	Update(devcgroup.Allowed) error
	Close() error
}

type v1Filter struct {
	h    *devcgroup.V1Handle
	node func() devcgroup.V1Node
}

func (f v1Filter) Update(a devcgroup.Allowed) error { return f.h.Update(a, f.node()) }
func (f v1Filter) Close() error                     { return f.h.Close() }

// tracked is what the enforcer did to one container.
type tracked struct {
	filter  filter
	allowed devcgroup.Allowed
	cpus    string // the cpuset written, "" when none
	failed  bool   // an attach failed and was logged; it is retried
	// stoodDown: left unfiltered while the kubelet does not report its
	// namespace's DRA devices (logged once).
	stoodDown bool
	// ref names the container exactly when the runtime told us (NRI);
	// nil: names come from the kubelet's log links.
	ref *ContainerRef
	// limits are the GPUs the container's memory limits are set on,
	// limitsKey the fractions they were set from; limitsFailed: the last
	// Set failed (logged once, counted in Enforcer.unlimited), retried.
	limits       []string
	limitsKey    string
	limitsFailed bool
	owner        limitsOwner // whose limits were set (for their metric)
	// hookAt is when the runtime's start hook began for this container; a
	// poll pass that read the cgroups and the kubelet before then leaves
	// it alone (neither releases nor changes its filter).
	hookAt time.Time
	// closed: the start hook could not learn the container's devices in
	// time and, the container being able to reach every device node
	// (privileged), attached a filter that allows no GPU; the next pass
	// opens it to the container's devices.
	closed bool
}

// Enforcer applies [Config] to every container. Create one with [New];
// Run it once.
type Enforcer struct {
	cfg      Config
	log      *slog.Logger
	ebpf     error // nil when eBPF filters work
	interval time.Duration

	status string // fixed at New

	mu      sync.Mutex // held by Reconcile while it applies, and by the hooks
	tracked map[string]*tracked

	warnMu sync.Mutex
	warned map[string]bool // warnings already logged, by kind

	draMu sync.Mutex // guards dra; taken after mu, never before
	dra   draState

	unlimited atomic.Int64 // containers whose memory limits failed

	lastUse map[string]memlimit.Sample // by GPU UUID: the last poll of limited containers' use (evict.go)
}

// New checks cfg and probes the kernel once.
func New(cfg Config, log *slog.Logger) (*Enforcer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Enforcer{cfg: cfg, log: log, interval: cfg.Interval, tracked: map[string]*tracked{}, warned: map[string]bool{}}
	if e.interval == 0 {
		e.interval = DefaultInterval
	}
	if cfg.Isolate {
		probe := cfg.Probe
		if probe == nil {
			probe = devcgroup.Probe
		}
		e.ebpf = probe()
		if e.ebpf == nil && cfg.Unified == "" {
			e.ebpf = fmt.Errorf("%w: no cgroup2 mount", devcgroup.ErrUnsupported)
		}
	}
	e.status = e.describe()
	return e, nil
}

// describe is the one-line state for logs and /readyz.
func (e *Enforcer) describe() string {
	var s string
	switch {
	case !e.cfg.Isolate:
		s = "device isolation: off"
	case e.ebpf == nil:
		s = "device isolation: ebpf on " + e.cfg.Unified
		if e.cfg.DRA != nil {
			s += " (DRA claims' devices)"
		}
	case e.cfg.V1Devices != "":
		s = fmt.Sprintf("device isolation: cgroup v1 devices on %s (ebpf not available: %v)", e.cfg.V1Devices, e.ebpf)
	default:
		s = fmt.Sprintf("device isolation: not available: %v", e.ebpf)
	}
	if e.cfg.CPUs != nil {
		s += "; cpu affinity: align on " + e.cfg.CPUs.Hierarchy()
	} else {
		s += "; cpu affinity: off"
	}
	return s
}

// Status is a one-line summary for /readyz: what is enforced, or why not.
// In DRA mode it also says when the kubelet does not report claims'
// devices, so DRA containers are left unfiltered. Safe for concurrent use.
func (e *Enforcer) Status() string { return e.status + e.draNote() + e.limitsNote() }

// Run polls until ctx ends, then detaches every filter it attached (the
// filters live as long as the agent: a restarted agent attaches them
// again within one interval). GPU memory limits are left set: the
// driver keeps them with the container's cgroup, so a container is not
// unlimited while the agent restarts, and a restarted agent sets the same
// values again.
func (e *Enforcer) Run(ctx context.Context) error {
	e.log.Info("enforcement starting", "status", e.Status(), "interval", e.interval)
	t := time.NewTicker(e.interval)
	defer t.Stop()
	defer e.closeAll()
	for {
		e.Reconcile(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (e *Enforcer) closeAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for rel, t := range e.tracked {
		if t.filter != nil {
			if err := t.filter.Close(); err != nil {
				e.log.Warn("device filter detach failed", "cgroup", rel, "err", err)
			}
		}
		delete(e.tracked, rel)
	}
}

// Reconcile does one pass: find containers, attach, update or release
// filters and cpusets. Run calls it every interval; tests call it
// directly.
//
// The pass reads the cgroup trees, the kubelet and the names before it
// takes the lock the runtime's start hook needs: the hook has the
// runtime's deadline (NRI: 2s) and must not wait out a slow kubelet call
// of the poll. A container the hook handled after these reads began keeps
// what the hook did: the pass's view of it is older.
func (e *Enforcer) Reconcile(ctx context.Context) {
	readAt := time.Now()
	found, complete := e.scanAll()
	var in passInputs
	ok := false
	if len(found) > 0 {
		in, ok = e.readInputs(ctx)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if complete {
		e.watchEvictions()
	}
	// Containers whose cgroup is gone: release. A tree that could not be
	// read releases nothing.
	for rel, t := range e.tracked {
		if _, ok := found[rel]; ok || !complete || t.hookAt.After(readAt) {
			continue
		}
		if t.filter != nil {
			if err := t.filter.Close(); err != nil {
				e.log.Debug("device filter release failed", "cgroup", rel, "err", err)
			}
			e.log.Debug("device filter released", "cgroup", rel)
		}
		e.clearLimits(rel, t)
		delete(e.tracked, rel)
	}
	if !ok {
		return
	}
	snap, pods, names := in.snap, in.pods, in.names
	inv := e.cfg.Inventory()
	rels := make([]string, 0, len(found))
	for rel := range found {
		rels = append(rels, rel)
	}
	sort.Strings(rels)
	for _, rel := range rels {
		c := found[rel]
		pod, ok := pods[c.podUID]
		if !ok {
			continue // not a pod the kubelet knows (yet): leave it alone
		}
		t := e.tracked[rel]
		if t == nil {
			t = &tracked{}
			e.tracked[rel] = t
		}
		if t.hookAt.After(readAt) {
			continue // the start hook read the kubelet after this pass did
		}
		ref, named := names[c.containerID]
		if t.ref != nil {
			ref, named = *t.ref, true
		}
		ctr := ""
		if named && ref.Namespace == pod.Namespace && ref.Pod == pod.Name {
			ctr = ref.Container
		}
		allowed, uuids := allowedFor(inv, e.cfg.Majors, e.ids(inv, snap, pod.Namespace, pod.Name, ctr))
		if e.cfg.Isolate {
			e.isolate(rel, t, allowed, uuids, snap.standDown[pod.Namespace], inv, "namespace", pod.Namespace, "pod", pod.Name)
		}
		if e.cfg.CPUs != nil && ctr != "" {
			e.applyCPUs(rel, c, t, inv, uuids)
		}
		if e.cfg.MemoryLimits != nil && ctr != "" {
			fs, err := e.fractions(inv, snap, pod.Namespace, pod.Name, ctr)
			e.applyLimits(rel, limitsOwner{pod.Namespace, pod.Name, c.podUID, ctr}, t, fs, err)
		}
	}
}

// scanAll reads every cgroup tree the enforcer watches; complete is false
// when one could not be read (then nothing is released).
func (e *Enforcer) scanAll() (found map[string]container, complete bool) {
	found = map[string]container{}
	roots := []string{e.cfg.Unified, e.cfg.V1Devices}
	if e.cfg.CPUs != nil {
		roots = append(roots, e.cfg.CPUs.Hierarchy())
	}
	complete = true
	for _, root := range roots {
		if root == "" {
			continue
		}
		cs, err := scan(root)
		if err != nil {
			e.warnOnce("scan", "pod cgroup tree read failed", "root", root, "err", err)
			complete = false
			continue
		}
		for rel, c := range cs {
			found[rel] = c
		}
	}
	if complete {
		e.cleared("scan")
	}
	return found, complete
}

// pollKubeletTimeout bounds a pass's kubelet call.
const pollKubeletTimeout = 5 * time.Second

// passInputs is what one pass reads besides the cgroup trees.
type passInputs struct {
	snap  snapshot
	pods  map[string]usage.PodRef
	names map[string]ContainerRef // nil: names unavailable
}

// readInputs asks the kubelet for its allocations and reads the pods' and
// containers' names; ok is false when enforcement must pause this pass.
func (e *Enforcer) readInputs(ctx context.Context) (in passInputs, ok bool) {
	// Not bounded by the interval: a kubelet slow under load (seconds on a
	// busy node) would pause enforcement pass after pass; the read holds no
	// lock, and the ticker drops the passes it delays.
	allocCtx, cancel := context.WithTimeout(ctx, max(e.interval, pollKubeletTimeout))
	snap, err := e.allocations(allocCtx)
	cancel()
	if err != nil {
		e.warnOnce("allocations", "pod resources unavailable, enforcement paused", "err", err)
		return in, false
	}
	e.cleared("allocations")
	pods, err := e.cfg.Pods.Pods()
	if err != nil {
		e.warnOnce("pods", "pod names unavailable, enforcement paused", "err", err)
		return in, false
	}
	e.cleared("pods")
	names, err := e.cfg.Containers.Containers()
	if err != nil {
		e.warnOnce("containers", "container names unavailable, falling back to pod-level devices", "err", err)
		names = nil
	} else {
		e.cleared("containers")
	}
	return passInputs{snap: snap, pods: pods, names: names}, true
}

// isolate decides one container's device filter, for the poll and the
// start hook alike: none while the kubelet does not report its
// namespace's DRA devices and no device of the container is known (the
// stand-down policy; logged once, with who), else the filter for
// allowed. A filter the hook closed for want of an answer gives way to
// either.
func (e *Enforcer) isolate(rel string, t *tracked, allowed devcgroup.Allowed, uuids []string, standDown bool, inv gpu.Inventory, who ...any) {
	if (t.filter == nil || t.closed) && standDown && len(uuids) == 0 {
		if t.closed {
			if err := t.filter.Close(); err != nil {
				e.log.Debug("device filter release failed", "cgroup", rel, "err", err)
			}
			t.filter, t.allowed, t.closed = nil, devcgroup.Allowed{}, false
		}
		if !t.stoodDown {
			e.log.Info("device filter not attached: the kubelet does not report this pod's DRA devices", append([]any{"cgroup", rel}, who...)...)
		}
		t.stoodDown = true
		return
	}
	t.stoodDown = false
	if t.closed {
		e.log.Info("device filter opened to the container's devices", "cgroup", rel, "allowed", allowed.String())
		t.closed = false
	}
	e.applyFilter(rel, t, allowed, inv)
}

func (e *Enforcer) applyFilter(rel string, t *tracked, a devcgroup.Allowed, inv gpu.Inventory) {
	if t.filter != nil {
		if t.allowed.Equal(a) {
			return
		}
		if err := t.filter.Update(a); err != nil {
			e.log.Warn("device filter update failed", "cgroup", rel, "allowed", a.String(), "err", err)
			return
		}
		e.log.Info("device filter updated", "cgroup", rel, "allowed", a.String())
		t.allowed = a
		return
	}
	f, err := e.attach(rel, a, inv)
	if err != nil {
		if !t.failed {
			e.log.Warn("device filter attach failed, retrying every interval", "cgroup", rel, "err", err)
		}
		t.failed = true
		return
	}
	if f == nil {
		return
	}
	t.filter, t.allowed = f, a
	e.log.Info("device filter attached", "cgroup", rel, "allowed", a.String())
}

// attach picks eBPF on the cgroup2 directory, else devices.deny on the v1
// devices directory; nil when the container has neither.
func (e *Enforcer) attach(rel string, a devcgroup.Allowed, inv gpu.Inventory) (filter, error) {
	if e.ebpf == nil {
		dir := filepath.Join(e.cfg.Unified, rel)
		if _, err := os.Stat(dir); err == nil {
			return devcgroup.Attach(dir, a)
		}
	}
	if e.cfg.V1Devices != "" {
		dir := filepath.Join(e.cfg.V1Devices, rel)
		if _, err := os.Stat(dir); err == nil {
			node := func() devcgroup.V1Node { return v1Node(e.cfg.Inventory()) }
			h, err := devcgroup.AttachV1(dir, a, v1Node(inv))
			if err != nil {
				return nil, err
			}
			return v1Filter{h: h, node: node}, nil
		}
	}
	return nil, nil
}

func v1Node(inv gpu.Inventory) devcgroup.V1Node {
	var n devcgroup.V1Node
	for _, g := range inv.GPUs {
		n.GPUMinors = append(n.GPUMinors, uint32(g.Minor))
	}
	return n
}

func (e *Enforcer) applyCPUs(rel string, c container, t *tracked, inv gpu.Inventory, uuids []string) {
	if len(uuids) == 0 {
		return
	}
	req, err := cpuaffinity.CPURequestMilli(filepath.Join(e.cfg.CPURoot, rel))
	if err != nil {
		e.log.Debug("cpu request unreadable", "cgroup", rel, "err", err)
		return
	}
	pinned := c.guaranteed && integerLimit(filepath.Join(e.cfg.CPURoot, rel))
	d := cpuaffinity.Plan(inv, e.cfg.OnlineCPUs, cpuaffinity.Container{GPUs: uuids, CPURequestMilli: req, Pinned: pinned})
	if d.Skip != "" {
		return
	}
	want := cpuaffinity.Format(d.CPUs)
	if cur, err := e.cfg.CPUs.Get(rel); err == nil && cpuaffinity.Format(cur) == want {
		t.cpus = want
		return
	}
	if err := e.cfg.CPUs.Set(rel, d.CPUs); err != nil {
		e.log.Warn("cpuset write failed", "cgroup", rel, "cpus", want, "err", err)
		return
	}
	if t.cpus != want {
		e.log.Info("cpuset aligned", "cgroup", rel, "cpus", want, "widened", d.Widened)
	} else {
		e.log.Debug("cpuset rewritten", "cgroup", rel, "cpus", want)
	}
	t.cpus = want
}

// warnOnce logs a warning once per outage: the caller calls cleared
// when the source answers again.
func (e *Enforcer) warnOnce(kind, msg string, args ...any) {
	e.warnMu.Lock()
	defer e.warnMu.Unlock()
	if e.warned[kind] {
		return
	}
	e.warned[kind] = true
	e.log.Warn(msg, args...)
}

// cleared ends an outage warnOnce logged: the next failure warns again.
func (e *Enforcer) cleared(kind string) {
	e.warnMu.Lock()
	defer e.warnMu.Unlock()
	e.warned[kind] = false
}
