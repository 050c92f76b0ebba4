package simnode

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// MemoryLimitsMinDriver is the first driver branch with per-cgroup GPU
// memory limits (nvmlDeviceSetMemoryLimits_v1, "MPS v3 memory
// partitioning"): r615.
const MemoryLimitsMinDriver = 615

// memLimit is one cgroup's limits on one GPU, in bytes. hard is
// nvml.DEVICE_MEMORY_LIMIT_MAX when only a soft limit is set.
type memLimit struct {
	soft, hard uint64
}

// WithDriverVersion makes the node report driver version v ("615.40.01")
// instead of its profile's: the driver branch decides which NVML calls
// exist (per-cgroup memory limits need [MemoryLimitsMinDriver]). New
// refuses a version whose branch is not a number.
func WithDriverVersion(v string) Option { return func(n *Node) { n.profile.DriverVersion = v } }

// driverBranch is the major number of a driver version ("550.54.15" is
// 550).
func driverBranch(v string) (int, error) {
	major, _, _ := strings.Cut(v, ".")
	b, err := strconv.Atoi(major)
	if err != nil || b <= 0 {
		return 0, fmt.Errorf("driver version %q: want <branch>.<minor>[.<patch>], such as 615.40.01", v)
	}
	return b, nil
}

// setMemoryLimitsFuncs installs the per-cgroup memory limit calls, as the
// driver has them from r615 (nvml.h: nvmlDeviceSetMemoryLimits_v1,
// nvmlDeviceGetMemoryLimits_v1):
//
//   - ERROR_NOT_SUPPORTED on a driver before r615 and on a GPU in MIG mode
//     (MIG device handles have no such call either);
//   - ERROR_INVALID_ARGUMENT for an empty or relative namespace, soft above
//     hard, or a limit above the GPU's memory (other than
//     DEVICE_MEMORY_LIMIT_MAX);
//   - ERROR_OPERATING_SYSTEM when the namespace (the cgroup's directory,
//     /sys/fs/cgroup/...) cannot be opened; a cgroup that is gone has lost
//     its limits, as removing a cgroup clears them;
//   - Get: ERROR_NOT_FOUND when the cgroup has no limits on the GPU, else
//     its limits and the memory its processes (those in it and below it)
//     hold on the GPU.
//
// Soft 0 with hard DEVICE_MEMORY_LIMIT_MAX clears a cgroup's limits. A hard
// limit of 0 is a limit: nothing can be allocated in that cgroup. A hard
// limit below what the cgroup holds already takes nothing back; its next
// allocations fail until it is under the limit again (the simulator's
// choice: the driver's behaviour there is not documented). The soft limit
// is guaranteed: under memory pressure, processes of cgroups above theirs
// (borrowers) are evicted to make room for a cgroup within its own (see
// [Device.makeRoomLocked]). Limits are kept in the state file.
func (d *Device) setMemoryLimitsFuncs() {
	d.SetMemoryLimits_v1Func = func(namespace string, soft, hard uint64) nvml.Return {
		if r := d.lostOr("SetMemoryLimits_v1"); r != nvml.SUCCESS {
			return r
		}
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		if r := d.memoryLimitsCallLocked(namespace); r != nvml.SUCCESS {
			return r
		}
		total := d.node.model.config.MemoryMB << 20
		if soft > hard || soft > total || (hard > total && hard != nvml.DEVICE_MEMORY_LIMIT_MAX) {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		if !cgroupExists(namespace) {
			d.dropLimitsLocked(namespace)
			return nvml.ERROR_OPERATING_SYSTEM
		}
		if soft == 0 && hard == nvml.DEVICE_MEMORY_LIMIT_MAX {
			delete(d.memLimits, namespace)
		} else {
			d.memLimits[namespace] = memLimit{soft: soft, hard: hard}
		}
		_ = d.node.saveStateLocked() // kept for StateErr
		return nvml.SUCCESS
	}
	d.GetMemoryLimits_v1Func = func(namespace string) (nvml.MemoryLimits_v1, nvml.Return) {
		if r := d.lostOr("GetMemoryLimits_v1"); r != nvml.SUCCESS {
			return nvml.MemoryLimits_v1{}, r
		}
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		if r := d.memoryLimitsCallLocked(namespace); r != nvml.SUCCESS {
			return nvml.MemoryLimits_v1{}, r
		}
		if !cgroupExists(namespace) {
			d.dropLimitsLocked(namespace)
			return nvml.MemoryLimits_v1{}, nvml.ERROR_OPERATING_SYSTEM
		}
		l, ok := d.memLimits[namespace]
		if !ok {
			return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_FOUND
		}
		return nvml.MemoryLimits_v1{NameSpace: namespace, SoftLimit: l.soft, HardLimit: l.hard, CurrentUsed: d.cgroupUsedLocked(namespace)}, nvml.SUCCESS
	}
}

// memoryLimitsCallLocked is ERROR_NOT_SUPPORTED where the driver has no
// per-cgroup limits (before r615, or on a GPU in MIG mode), and
// ERROR_INVALID_ARGUMENT for a namespace that is not an absolute path.
func (d *Device) memoryLimitsCallLocked(namespace string) nvml.Return {
	b, err := driverBranch(d.node.profile.DriverVersion)
	if err != nil || b < MemoryLimitsMinDriver || d.migCurrent == nvml.DEVICE_MIG_ENABLE {
		return nvml.ERROR_NOT_SUPPORTED
	}
	if namespace == "" || !filepath.IsAbs(namespace) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return nvml.SUCCESS
}

// dropLimitsLocked forgets the limits of a cgroup that is gone.
func (d *Device) dropLimitsLocked(namespace string) {
	if _, ok := d.memLimits[namespace]; ok {
		delete(d.memLimits, namespace)
		_ = d.node.saveStateLocked() // kept for StateErr
	}
}

func cgroupExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// inCgroup reports whether a process in cgroup proc is charged to cgroup
// ns: it is ns or below it.
func inCgroup(proc, ns string) bool {
	if proc == "" {
		return false
	}
	ns = strings.TrimSuffix(ns, "/")
	return proc == ns || strings.HasPrefix(proc, ns+"/")
}

// cgroupUsedLocked is the memory the processes in cgroup ns and below it
// hold on the GPU.
func (d *Device) cgroupUsedLocked(ns string) uint64 {
	var used uint64
	for _, p := range d.procs {
		if inCgroup(p.cgroup, ns) {
			used += p.memBytes
		}
	}
	return used
}

// chargeLocked checks that a process in cgroup can allocate bytes more on
// the GPU: that neither its cgroup nor one above it goes past its hard
// limit. It fails with ERROR_MEMORY, the driver's out-of-memory error,
// naming the cgroup whose limit it hit.
func (d *Device) chargeLocked(cgroup string, bytes uint64) error {
	if cgroup == "" || len(d.memLimits) == 0 || d.memoryLimitsCallLocked("/") != nvml.SUCCESS {
		return nil // no limits, or none this driver or MIG mode enforces
	}
	nss := make([]string, 0, len(d.memLimits))
	for ns := range d.memLimits {
		nss = append(nss, ns)
	}
	sort.Strings(nss) // the outermost limit hit is named
	for _, ns := range nss {
		l := d.memLimits[ns]
		if !inCgroup(cgroup, ns) || l.hard == nvml.DEVICE_MEMORY_LIMIT_MAX {
			continue
		}
		if used := d.cgroupUsedLocked(ns); used+bytes > l.hard {
			return fmt.Errorf("%d bytes more would make %d in cgroup %s, above its hard limit of %d: %w", bytes, used+bytes, ns, l.hard, nvml.ERROR_MEMORY)
		}
	}
	return nil
}

// memLimitsSnapshotLocked lists the GPU's limits sorted by cgroup, for the
// state file.
func (d *Device) memLimitsSnapshotLocked() []memLimitState {
	if len(d.memLimits) == 0 {
		return nil
	}
	out := make([]memLimitState, 0, len(d.memLimits))
	for ns, l := range d.memLimits {
		out = append(out, memLimitState{Cgroup: ns, SoftBytes: l.soft, HardBytes: l.hard})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cgroup < out[j].Cgroup })
	return out
}

// memLimitState is one cgroup's limits in the state file.
type memLimitState struct {
	Cgroup    string `json:"cgroup"`
	SoftBytes uint64 `json:"softBytes"`
	HardBytes uint64 `json:"hardBytes"`
}

// loadMemLimits restores the GPU's limits from the state file, refusing
// values the driver would have refused.
func (d *Device) loadMemLimits(ls []memLimitState) error {
	total := d.node.model.config.MemoryMB << 20
	for _, l := range ls {
		switch {
		case l.Cgroup == "" || !filepath.IsAbs(l.Cgroup):
			return fmt.Errorf("memory limit for cgroup %q: want the cgroup's absolute path", l.Cgroup)
		case l.SoftBytes > l.HardBytes || l.SoftBytes > total || (l.HardBytes > total && l.HardBytes != nvml.DEVICE_MEMORY_LIMIT_MAX):
			return fmt.Errorf("memory limit for cgroup %s: soft %d, hard %d: want soft <= hard <= %d (the GPU's memory)", l.Cgroup, l.SoftBytes, l.HardBytes, total)
		}
		d.memLimits[l.Cgroup] = memLimit{soft: l.SoftBytes, hard: l.HardBytes}
	}
	return nil
}
