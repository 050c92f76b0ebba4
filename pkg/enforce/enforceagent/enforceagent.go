// Package enforceagent is the agent's enforcement component: it reads the
// node's cgroup mounts and NVIDIA majors, builds the per-container
// enforcer ([enforce.Enforcer]: device filters, NUMA cpusets, GPU memory
// limits) and the NRI plugin on it, and says in one line what is
// enforced. It opens no NVML handle: the library comes in opened.
package enforceagent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpud/gpud/internal/flagfile"
	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/internal/taskgroup"
	"github.com/gpud/gpud/pkg/agentsrc"
	"github.com/gpud/gpud/pkg/cgroupfs"
	"github.com/gpud/gpud/pkg/cpuaffinity"
	"github.com/gpud/gpud/pkg/devcgroup"
	"github.com/gpud/gpud/pkg/devnodes"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/enforce"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/memlimit"
	"github.com/gpud/gpud/pkg/nriplugin"
	"github.com/gpud/gpud/pkg/procattr"
)

// The CPUAffinity modes (--cpu-affinity).
const (
	CPUAffinityOff   = "off"
	CPUAffinityAlign = "align"
)

// The MemoryLimits settings (--memory-limits).
const (
	// MemoryLimitsAuto sets driver-enforced GPU memory limits on every
	// GPU whose driver has them (the default; "" means it too).
	MemoryLimitsAuto = "auto"
	// MemoryLimitsOff sets none: fractions are held by MPS limits and the
	// watchdog alone, as before r615.
	MemoryLimitsOff = "off"
)

// Options are per-container enforcement's settings: device isolation (on
// by default where the node supports it) and NUMA-aligned cpusets (off by
// default: it writes cpusets the kubelet may also manage).
type Options struct {
	IsolateDevices    bool
	CPUAffinity       string        // CPUAffinityOff or CPUAffinityAlign
	Interval          time.Duration // how often the pod cgroup tree is read; at most enforce.MaxInterval
	ContainerLogsRoot string        // the kubelet's container log links
	NRISocket         string        // the runtime's NRI socket; "" disables NRI
	ProcRoot          string        // the host's /proc
	SysfsRoot         string        // the host's /sys (online CPUs)
	// Simulated is true on a simulated node; SimDevFiles when it owns
	// device files (--sim-dev-root) and so serves this node's containers.
	Simulated, SimDevFiles bool
	// DRAPluginsDir is the kubelet's plugins dir when the DRA driver
	// runs ("" when it does not): prepared claims are read from its
	// checkpoint there.
	DRAPluginsDir string
	MPS           bool // fractions run under MPS
	// MemoryLimits is MemoryLimitsAuto ("" too) or MemoryLimitsOff.
	MemoryLimits string
	// MemoryLimitModes, when set, is told each GPU's memory limit mode
	// ("driver", "mps", "watchdog") by UUID once Build has decided them
	// (before it returns), for the DRA driver's memoryLimitMode attribute;
	// it is not called when the modes could not be decided.
	MemoryLimitModes func(map[string]string)
}

// Validate checks the settings, each error naming its flag.
func (o Options) Validate() error {
	var errs []error
	switch o.CPUAffinity {
	case CPUAffinityOff, CPUAffinityAlign:
	default:
		errs = append(errs, flagErr("cpu-affinity", "%s: want align or off", printable.Quote(o.CPUAffinity)))
	}
	switch o.MemoryLimits {
	case "", MemoryLimitsAuto, MemoryLimitsOff:
	default:
		errs = append(errs, flagErr("memory-limits", "%s: want auto or off", printable.Quote(o.MemoryLimits)))
	}
	if o.Interval <= 0 || o.Interval > enforce.MaxInterval {
		errs = append(errs, flagErr("enforce-interval", "%s: want more than 0 and at most %s", o.Interval, enforce.MaxInterval))
	}
	return errors.Join(errs...)
}

// flagErr is a bad value of the flag name.
func flagErr(name, format string, args ...any) error {
	return &flagfile.FlagError{Flag: name, Err: fmt.Errorf(format, args...)}
}

// Build builds the enforcer on the node's cgroup mounts (read from
// <ProcRoot>/self/mountinfo) and NVIDIA majors (<ProcRoot>/devices), with
// GPU memory limits on lib's GPUs (nil lib: none; their mode gauge goes
// to metrics). It returns no task when all parts are off, and the NRI
// plugin's task next to the poll's unless NRISocket is empty. Isolation
// or memory limits that the node cannot do are logged once and reported
// in the status (the one line /readyz shows), not an error; CPUAffinity
// align without a cpuset hierarchy is an error.
func Build(o Options, src *agentsrc.Sources, lib nvml.Interface, metrics prometheus.Registerer, inventory func() gpu.Inventory, log *slog.Logger) ([]taskgroup.Task, func() string, error) {
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	isolate := o.IsolateDevices
	align := o.CPUAffinity == CPUAffinityAlign
	if !isolate && !align && lib == nil {
		return nil, nil, nil
	}
	// A simulated node's GPUs are not the host's: filters and cpusets made
	// from its inventory must not land on the host's real containers (make
	// run on a workstation). It is the node's GPU stand-in when it owns
	// device files (--sim-dev-root: the kubelet's containers get them), and
	// tests point --proc-root at a temp dir whose mountinfo names test
	// cgroups.
	if o.Simulated && !o.SimDevFiles && filepath.Clean(o.ProcRoot) == procattr.DefaultProcRoot {
		if align {
			return nil, nil, flagErr("cpu-affinity", "align with --simulate needs --sim-dev-root (the simulated node serves this node's containers) or --proc-root pointed away from the host's %s: a simulated node must not set the host containers' cpusets", procattr.DefaultProcRoot)
		}
		const reason = "simulated node without --sim-dev-root: the host's containers are not the simulated node's (with --sim-dev-root, it serves this node's containers and filters them)"
		log.Info("device isolation not available", "reason", reason)
		return nil, func() string { return "device isolation: not available: " + reason }, nil
	}
	mounts, err := readMounts(filepath.Join(o.ProcRoot, "self", "mountinfo"))
	if err != nil {
		if align {
			return nil, nil, fmt.Errorf("--cpu-affinity align: %w", err)
		}
		log.Warn("device isolation not available", "reason", err.Error())
		status := "device isolation: not available: " + err.Error()
		return nil, func() string { return status }, nil
	}
	majors, err := readMajors(filepath.Join(o.ProcRoot, "devices"))
	if err != nil {
		log.Warn("nvidia majors unknown, mig caps not filtered", "err", err)
	}
	majors = simMajors(majors, o.Simulated && o.SimDevFiles)
	ecfg := enforce.Config{
		Unified: mounts.Unified, V1Devices: mounts.V1["devices"], Isolate: isolate, Majors: majors,
		Interval: o.Interval, Inventory: inventory, Allocations: src.Pods, Pods: src.PodNames,
		Containers: enforce.ContainerLogs{Root: o.ContainerLogsRoot},
	}
	if src.Events != nil { // a nil *Recorder in the interface would be a non-nil Events
		ecfg.Events = src.Events
	}
	if o.DRAPluginsDir != "" {
		dir, err := filepath.Abs(o.DRAPluginsDir)
		if err != nil {
			return nil, nil, flagErr("kubelet-plugins-dir", "%s: %w", o.DRAPluginsDir, err)
		}
		ecfg.DRA = &enforce.DRA{Resources: src.Pods, Prepared: enforce.CheckpointClaims(filepath.Join(dir, dra.DriverName))}
	}
	if align {
		w, err := cpuaffinity.NewWriter(mounts.Unified, mounts.V1["cpuset"])
		if err != nil {
			return nil, nil, fmt.Errorf("--cpu-affinity align: %w", err)
		}
		online, err := readOnlineCPUs(filepath.Join(o.SysfsRoot, "devices", "system", "cpu", "online"))
		if err != nil {
			return nil, nil, fmt.Errorf("--cpu-affinity align: %w", err)
		}
		ecfg.CPUs, ecfg.OnlineCPUs, ecfg.CPURoot = w, online, cpuRoot(mounts)
	}
	limitsStatus := func() string { return "" }
	if lib != nil {
		ml, err := newMemoryLimits(lib, mounts.Unified, o.MPS, o.MemoryLimits == MemoryLimitsOff, log)
		switch {
		case err != nil:
			log.Warn("gpu memory limits not available", "err", err)
			limitsStatus = func() string { return "memory limits: not available: " + err.Error() }
		default:
			if err := registerMemoryLimits(ml, metrics, &ecfg); err != nil {
				return nil, nil, err
			}
			if mounts.Unified != "" {
				ecfg.MemoryLimits = ml
				if src.Sharing != nil {
					ecfg.Sharing = src.Sharing.Sharing
				}
			}
			limitsStatus = ml.Status
			if o.MemoryLimitModes != nil {
				o.MemoryLimitModes(ml.ModeNames())
			}
		}
	}
	e, err := enforce.New(ecfg, log)
	if err != nil {
		return nil, nil, err
	}
	if s := e.Status(); strings.Contains(s, "not available") {
		log.Warn("device isolation not available", "status", s)
	}
	tasks := []taskgroup.Task{{Name: "enforce", Run: e.Run}}
	if o.NRISocket != "" {
		tasks = append(tasks, taskgroup.Task{Name: "nri", Run: nriplugin.New(o.NRISocket, e, log.With("component", "nri")).Run})
	}
	status := func() string {
		if l := limitsStatus(); l != "" {
			return e.Status() + "\n" + l
		}
		return e.Status()
	}
	return tasks, status, nil
}

// newMemoryLimits builds the GPU memory limit manager on lib's GPUs and
// the cgroup2 mount (empty: none, so no GPU gets driver limits), with
// mps saying whether fractions run under MPS and off that driver limits
// are turned off (--memory-limits=off), and logs each GPU's mode and why.
func newMemoryLimits(lib nvml.Interface, unified string, mps, off bool, log *slog.Logger) (*memlimit.Manager, error) {
	version, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("driver version: %w", ret)
	}
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU count: %w", ret)
	}
	devs := make([]memlimit.Device, 0, count)
	for i := range count {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: %w", i, ret)
		}
		devs = append(devs, d)
	}
	m, err := memlimit.New(memlimit.Config{CgroupRoot: unified, DriverVersion: version, MPS: mps, Off: off, Devices: devs})
	if err != nil {
		return nil, err
	}
	for _, d := range m.Decisions() {
		log.Info("gpu memory limit mode", "gpu_uuid", d.UUID, "mode", d.Mode, "reason", d.Reason)
	}
	return m, nil
}

// registerMemoryLimits puts the modes' gauge and the enforcer's memory
// limit metrics on reg (nil: nowhere).
func registerMemoryLimits(m *memlimit.Manager, reg prometheus.Registerer, ecfg *enforce.Config) error {
	if reg == nil {
		return nil
	}
	if err := m.Register(reg); err != nil {
		return err
	}
	em, err := enforce.NewMetrics(reg)
	if err != nil {
		return err
	}
	ecfg.Metrics = em
	return nil
}

func readMounts(path string) (cgroupfs.Mounts, error) {
	f, err := os.Open(path)
	if err != nil {
		return cgroupfs.Mounts{}, fmt.Errorf("read cgroup mounts: %w (is --proc-root the host's /proc?)", err)
	}
	defer f.Close()
	m, err := cgroupfs.Parse(f)
	if err != nil {
		return cgroupfs.Mounts{}, err
	}
	if m.Unified == "" && len(m.V1) == 0 {
		return cgroupfs.Mounts{}, fmt.Errorf("no cgroup mounts in %s: mount the host's /sys/fs/cgroup", path)
	}
	return m, nil
}

// simMajors are the majors of a simulated node's device files
// (--sim-dev-root): no driver registers nvidia-uvm or nvidia-caps in
// /proc/devices, and without their majors a container (a privileged one,
// whose device cgroup the runtime opens to everything) could open every
// MIG cap of the node. Majors the kernel does list are kept.
func simMajors(m devcgroup.Majors, simDevFiles bool) devcgroup.Majors {
	if !simDevFiles {
		return m
	}
	if m.UVM == 0 {
		m.UVM = devnodes.SimUVMMajor
	}
	if m.Caps == 0 {
		m.Caps = devnodes.SimCapsMajor
	}
	return m
}

func readMajors(path string) (devcgroup.Majors, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return devcgroup.Majors{}, nil
		}
		return devcgroup.Majors{}, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	return devcgroup.ParseProcDevices(f)
}

func readOnlineCPUs(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read online CPUs: %w (is --sysfs-root the host's /sys?)", err)
	}
	return cpuaffinity.Parse(string(b))
}

// cpuRoot is the hierarchy with the kubelet's CPU requests and quotas: the
// cgroup2 mount when it has the cpu controller, else the v1 cpu mount.
func cpuRoot(m cgroupfs.Mounts) string {
	if m.Unified != "" {
		if b, err := os.ReadFile(filepath.Join(m.Unified, "cgroup.controllers")); err == nil && strings.Contains(" "+strings.TrimSpace(string(b))+" ", " cpu ") {
			return m.Unified
		}
	}
	return m.V1["cpu"]
}
