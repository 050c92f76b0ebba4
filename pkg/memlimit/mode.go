// Package memlimit decides, per GPU, which mechanism holds a fraction's
// container to its GPU memory, and sets the driver-enforced limits where
// the driver has them: NVIDIA drivers from r615 limit GPU memory per cgroup
// (NVML SetMemoryLimits_v1, "MPS v3 memory partitioning": the hard limit
// fails allocations past it, the soft limit is what is guaranteed), which a
// process inside the container cannot lift, unlike the CUDA_MPS_*
// environment MPS limits come from.
//
// The modes, strongest first, are [ModeDriver], [ModeMPS] and
// [ModeWatchdog]; [Decide] picks one from what NVML says about the GPU and
// gives the reason. A [Manager] probes the node's GPUs once and sets and
// clears a container's limits on the GPUs whose mode is [ModeDriver].
//
// The package takes NVML device handles and the cgroup2 mount from its
// caller; it creates no handle and reads no file.
package memlimit

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Mode is how a fraction's GPU memory is enforced on one GPU.
type Mode string

const (
	// ModeDriver: the driver limits each container's cgroup (soft =
	// request, hard = limit); allocations past the hard limit fail.
	ModeDriver Mode = "driver"
	// ModeMPS: the MPS pinned-memory limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT,
	// which a process can change) and the watchdog.
	ModeMPS Mode = "mps"
	// ModeWatchdog: the memory watchdog alone, after the fact.
	ModeWatchdog Mode = "watchdog"
)

// MinDriverBranch is the first driver branch with per-cgroup memory
// limits.
const MinDriverBranch = 615

// Facts is what decides a GPU's mode.
type Facts struct {
	// UUID names the GPU.
	UUID string
	// DriverVersion is NVML's SystemGetDriverVersion ("615.40.01").
	DriverVersion string
	// MIG is true for a GPU in MIG mode: the driver has no per-cgroup
	// limits there.
	MIG bool
	// CgroupV2 is true when the unified hierarchy is mounted: the driver
	// names a container by its cgroup2 path.
	CgroupV2 bool
	// Probe is what GetMemoryLimits_v1 on the cgroup2 mount returned:
	// SUCCESS or ERROR_NOT_FOUND (no limits there) mean the call works;
	// ERROR_NOT_SUPPORTED or ERROR_FUNCTION_NOT_FOUND (a library without
	// it) that the driver lacks it. Unset (SUCCESS) without CgroupV2.
	Probe nvml.Return
	// MPS is true when fractions of this GPU run under an MPS daemon.
	MPS bool
	// Off: the agent was told not to use driver limits
	// (--memory-limits=off).
	Off bool
}

// Decision is a GPU's mode and why.
type Decision struct {
	UUID string
	// Index is the GPU's NVML index, for the metric's gpu label; -1
	// when unknown. [Decide] leaves it 0; [New] fills it in.
	Index  int
	Mode   Mode
	Reason string
}

// Decide picks the strongest mode the GPU has: driver limits where the
// driver answers the probe on a cgroup2 node outside MIG mode, else MPS
// where fractions run under MPS, else the watchdog. The reason says why
// the stronger modes do not apply.
func Decide(f Facts) Decision {
	d := Decision{UUID: f.UUID}
	whyNot := driverMissing(f)
	if whyNot == "" {
		d.Mode, d.Reason = ModeDriver, fmt.Sprintf("driver %s limits GPU memory per cgroup", f.DriverVersion)
		return d
	}
	if f.MPS {
		d.Mode, d.Reason = ModeMPS, "no driver memory limits ("+whyNot+"); MPS pinned-memory limits"
		return d
	}
	d.Mode, d.Reason = ModeWatchdog, "no driver memory limits ("+whyNot+") and no MPS"
	return d
}

// driverMissing says why the driver cannot limit the GPU's memory per
// cgroup, "" when it can.
func driverMissing(f Facts) string {
	branch, known := driverBranch(f.DriverVersion)
	switch {
	case f.Off:
		return "turned off by --memory-limits=off"
	case f.MIG:
		return "MIG mode on"
	case !f.CgroupV2:
		return "no cgroup v2"
	case f.Probe == nvml.SUCCESS || f.Probe == nvml.ERROR_NOT_FOUND:
		return ""
	case (f.Probe == nvml.ERROR_NOT_SUPPORTED || f.Probe == nvml.ERROR_FUNCTION_NOT_FOUND) && known && branch < MinDriverBranch:
		return fmt.Sprintf("driver %s predates r%d", f.DriverVersion, MinDriverBranch)
	default:
		return "NVML GetMemoryLimits_v1: " + f.Probe.Error()
	}
}

// driverBranch is a driver version's major number ("550.54.15": 550).
func driverBranch(v string) (int, bool) {
	major, _, _ := strings.Cut(v, ".")
	b, err := strconv.Atoi(major)
	return b, err == nil && b > 0
}
