package main

import (
	"flag"
	"log/slog"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpud/gpud/internal/taskgroup"
	"github.com/gpud/gpud/pkg/agentsrc"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/enforce"
	"github.com/gpud/gpud/pkg/enforce/enforceagent"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/nriplugin"
)

// enforceOptions are the flags of per-container enforcement; the rest of
// its settings come from the agent's other flags (newEnforceTasks).
type enforceOptions struct{ enforceagent.Options }

func (o *enforceOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.IsolateDevices, "isolate-devices", true, "let each container open only the GPUs (and MIG caps) the kubelet allocated it, with an eBPF device filter on its cgroup v2 directory (cgroup v1: devices.deny); where the kernel cannot, the agent says why once and in /readyz, and runs without. With --kubelet-api dra: the "+dra.DriverName+" devices PodResources lists per container (kubelet feature gate KubeletPodResourcesDynamicResources, on by default from 1.34); a kubelet that lists none while claims are prepared is said once and in /readyz, and new containers in those claims' namespaces are left unfiltered")
	fs.StringVar(&o.CPUAffinity, "cpu-affinity", enforceagent.CPUAffinityOff, "align: give each GPU container that the kubelet's CPU manager did not pin a cpuset on its GPUs' NUMA node(s) (all CPUs when its CPU request needs more); off: leave cpusets alone")
	fs.DurationVar(&o.Interval, "enforce-interval", enforce.DefaultInterval, "how often the pod cgroup tree is read for new containers (at most 1s: a container is filtered within this long of its cgroup appearing)")
	fs.StringVar(&o.ContainerLogsRoot, "container-logs-root", enforce.DefaultContainerLogsRoot, "the kubelet's container log links (<pod>_<namespace>_<container>-<id>.log), which map container IDs to names")
	fs.StringVar(&o.MemoryLimits, "memory-limits", enforceagent.MemoryLimitsAuto, "auto: set driver-enforced GPU memory limits (NVML SetMemoryLimits_v1, r615+ drivers on cgroup v2, not MIG) on each fraction's container where the GPU's driver has them (soft = the request, hard = the claim's memoryLimit); off: set none, fractions are held by MPS limits and the watchdog only (each GPU's mode and why are in /readyz, gpud_memory_limit_mode and the ResourceSlice attribute memoryLimitMode)")
	fs.StringVar(&o.NRISocket, "nri-socket", nriplugin.DefaultSocket, "the runtime's NRI socket: with it, cpusets are set at container creation and device filters attached before the container starts (the cgroup poll stays on as the fallback); absent is fine, empty disables NRI")
}

func (o *enforceOptions) validate() []error { return splitErrors(o.Validate()) }

// enforceStatus is the one-line state /readyz shows; "" when off.
type enforceStatus func() string

// newEnforceTasks builds enforcement (see [enforceagent.Build]) on the
// agent's flags; limitModes (nil: nobody) is told each GPU's memory limit
// mode once decided.
func newEnforceTasks(cfg *agentConfig, src *agentsrc.Sources, lib nvml.Interface, metrics prometheus.Registerer, inventory func() gpu.Inventory, limitModes func(map[string]string), log *slog.Logger) ([]taskgroup.Task, enforceStatus, error) {
	o := cfg.enforce.Options
	o.MemoryLimitModes = limitModes
	o.ProcRoot, o.SysfsRoot, o.MPS = cfg.procRoot, cfg.dra.sysfsRoot, cfg.mps.enabled
	o.Simulated, o.SimDevFiles = cfg.nvml.simulate != "", cfg.nvml.devRoot != ""
	if draEnabled(&cfg.dra) {
		o.DRAPluginsDir = cfg.dra.pluginsDir
	}
	return enforceagent.Build(o, src, lib, metrics, inventory, log)
}

// splitErrors is err as a list: the errors an errors.Join holds, so each
// keeps its own flag (and config file line).
func splitErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err != nil {
		return []error{err}
	}
	return nil
}
