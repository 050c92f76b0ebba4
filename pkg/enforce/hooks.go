package enforce

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpud/gpud/pkg/cpuaffinity"
)

// ContainerInfo is a container as the runtime describes it at creation
// (through NRI): exact names, no log links needed.
type ContainerInfo struct {
	Namespace, Pod, Container string
	// PodUID is the pod's UID; empty when unknown (events about the
	// container then lack it).
	PodUID string
	// CgroupsPath is the OCI linux.cgroupsPath: "/kubepods/..." (cgroupfs)
	// or "slice:prefix:name" (systemd).
	CgroupsPath string
	// Guaranteed is the pod's QoS class being Guaranteed.
	Guaranteed bool
	// CPURequestMilli is the container's CPU request; CPUQuota and
	// CPUPeriod its limit (0: none).
	CPURequestMilli     int64
	CPUQuota, CPUPeriod int64
	// AllDevices: the container's device cgroup allows every device (a
	// privileged container), so only gpud's filter keeps it off the GPUs
	// it was not given.
	AllDevices bool
}

// Rel is the container's cgroup path inside a hierarchy, "/..."; the
// systemd form expands its slice ("kubepods-burstable-pod<u>.slice" is
// /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<u>.slice)
// and names the scope <prefix>-<name>.scope.
func (c ContainerInfo) Rel() string {
	p := c.CgroupsPath
	slice, rest, systemd := strings.Cut(p, ":")
	if !systemd || strings.HasPrefix(p, "/") {
		return "/" + strings.TrimPrefix(filepath.Clean("/"+p), "/")
	}
	prefix, name, _ := strings.Cut(rest, ":")
	var dirs []string
	if slice != "" && slice != "-.slice" {
		base := strings.TrimSuffix(slice, ".slice")
		parts := strings.Split(base, "-")
		for i := range parts {
			dirs = append(dirs, strings.Join(parts[:i+1], "-")+".slice")
		}
	}
	unit := name + ".scope"
	if prefix != "" {
		unit = prefix + "-" + unit
	}
	return "/" + strings.Join(append(dirs, unit), "/")
}

// pinned: Guaranteed with a whole number of CPUs as its limit.
func (c ContainerInfo) pinned() bool {
	return c.Guaranteed && c.CPUQuota > 0 && c.CPUPeriod > 0 && c.CPUQuota%c.CPUPeriod == 0
}

// CPUSetAtCreate returns the cpuset a container should be created with
// ("" to leave it to the runtime): the same rule as the poll, applied
// before the container's process exists. Errors are logged, never
// returned: a runtime hook must not fail a container.
func (e *Enforcer) CPUSetAtCreate(ctx context.Context, c ContainerInfo) string {
	if e.cfg.CPUs == nil {
		return ""
	}
	snap, err := e.allocations(ctx)
	if err != nil {
		e.log.Warn("cpuset at create skipped", "container", c.Namespace+"/"+c.Pod+"/"+c.Container, "err", err)
		return ""
	}
	inv := e.cfg.Inventory()
	_, uuids := allowedFor(inv, e.cfg.Majors, e.ids(inv, snap, c.Namespace, c.Pod, c.Container))
	if len(uuids) == 0 {
		return ""
	}
	d := cpuaffinity.Plan(inv, e.cfg.OnlineCPUs, cpuaffinity.Container{GPUs: uuids, CPURequestMilli: c.CPURequestMilli, Pinned: c.pinned()})
	if d.Skip != "" {
		return ""
	}
	return cpuaffinity.Format(d.CPUs)
}

// ContainerStarting attaches the device filter to a container that the
// runtime created and is about to start, and sets its GPU memory limits
// ([Config.MemoryLimits]) on the GPUs in driver mode, so its process never
// runs unfiltered or, on those GPUs, past its fraction. The poll keeps
// both up to date afterwards and releases them with the cgroup. Errors
// are logged, never returned.
//
// A memory limit that cannot be set does not stop the container. The
// runtime hook has no way to refuse a start here (and the runtime starts
// the container anyway once the hook's time is up), and failing every
// start on a GPU whose driver refuses a call would take the node's
// fractions down for a driver fault; the fraction is then held as on a
// GPU without driver limits (the MPS limit in its environment and the
// memory watchdog), the failure is logged with the container, counted in
// gpud_memory_limit_sets_total{result="failure"} and
// gpud_memory_limit_unset_containers, shown in Status, and retried every
// poll until the driver takes it.
func (e *Enforcer) ContainerStarting(ctx context.Context, c ContainerInfo) {
	if !e.cfg.Isolate && e.cfg.MemoryLimits == nil {
		return
	}
	began := time.Now()
	kctx, cancel := hookContext(ctx)
	defer cancel()
	// Ask the kubelet before taking the lock; a poll pass holds it only
	// while it applies (see Reconcile).
	snap, err := e.allocations(kctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	defer func() {
		if d := time.Since(began); d > slowHook {
			e.log.Warn("container start hook slow", "container", c.String(), "all_devices", c.AllDevices, "took", d.Round(time.Millisecond), "deadline_left", deadlineLeft(ctx))
		}
	}()
	rel := c.Rel()
	ref := ContainerRef{Namespace: c.Namespace, Pod: c.Pod, Container: c.Container}
	t := e.tracked[rel]
	if t == nil {
		t = &tracked{}
		e.tracked[rel] = t
	}
	t.ref = &ref
	// A poll pass that read the cgroups or the kubelet before now leaves
	// this container to the hook (it may not even have seen its cgroup).
	t.hookAt = began
	inv := e.cfg.Inventory()
	if err != nil {
		if e.cfg.Isolate && c.AllDevices && t.filter == nil {
			// Fail closed: this container can reach every device node, and
			// which GPUs are its own is unknown until the kubelet answers.
			t.closed = true
			none, _ := allowedFor(inv, e.cfg.Majors, nil)
			e.applyFilter(rel, t, none, inv)
			e.log.Warn("device filter attached closed: pod resources not read in time for a container that reaches every device, the next poll opens it to its GPUs",
				"cgroup", rel, "container", c.String(), "err", err)
			return
		}
		e.log.Warn("device filter and memory limits at start skipped, pod resources unavailable", "cgroup", rel, "container", c.String(), "all_devices", c.AllDevices, "err", err)
		return
	}
	if e.cfg.Isolate {
		allowed, uuids := allowedFor(inv, e.cfg.Majors, e.ids(inv, snap, c.Namespace, c.Pod, c.Container))
		e.isolate(rel, t, allowed, uuids, snap.standDown[c.Namespace], inv, "container", c.String())
	}
	if e.cfg.MemoryLimits != nil {
		fs, err := e.fractions(inv, snap, c.Namespace, c.Pod, c.Container)
		e.applyLimits(rel, limitsOwner{c.Namespace, c.Pod, c.PodUID, c.Container}, t, fs, err)
	}
}

// The start hook's time: containerd gives an NRI plugin 2s per request
// (plugin_request_timeout) and closes a plugin that misses it, so every
// later container starts without the hook until the plugin reconnects.
// The hook stops waiting on the kubelet hookMargin before the runtime's
// deadline, or after hookBudget when the runtime set none.
const (
	hookMargin = 400 * time.Millisecond
	hookBudget = 1500 * time.Millisecond
	minBudget  = 100 * time.Millisecond
	// slowHook: a hook that takes longer is logged with what was left.
	slowHook = time.Second
)

// hookContext bounds the hook's kubelet call by the runtime's deadline.
func hookContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithTimeout(ctx, hookBudget)
	}
	stop := d.Add(-hookMargin)
	if floor := time.Now().Add(minBudget); stop.Before(floor) {
		stop = floor
	}
	return context.WithDeadline(ctx, stop)
}

// deadlineLeft is the time left before ctx's deadline, for logs.
func deadlineLeft(ctx context.Context) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return time.Until(d).Round(time.Millisecond)
}

// ContainerRemoved releases what the enforcer holds for a container: its
// device filter and its GPU memory limits.
func (e *Enforcer) ContainerRemoved(c ContainerInfo) {
	e.mu.Lock()
	defer e.mu.Unlock()
	rel := c.Rel()
	if t := e.tracked[rel]; t != nil {
		if t.filter != nil {
			if err := t.filter.Close(); err != nil {
				e.log.Debug("device filter release failed", "cgroup", rel, "err", err)
			}
		}
		e.clearLimits(rel, t)
	}
	delete(e.tracked, rel)
}

// String names the container for logs.
func (c ContainerInfo) String() string {
	return fmt.Sprintf("%s/%s/%s", c.Namespace, c.Pod, c.Container)
}
