package simnode

import (
	"fmt"
	"math"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The environment a CUDA process reads to become an MPS client, and the
// limits it applies (CUDA's names; pkg/timeslice writes them).
const (
	EnvMPSPipeDirectory          = "CUDA_MPS_PIPE_DIRECTORY"
	EnvMPSActiveThreadPercentage = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvMPSPinnedDeviceMemLimit   = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
)

// mpsControlSocket is the control daemon's socket in its pipe directory.
const mpsControlSocket = "control"

// ProcessSpec is a CUDA process started on a whole GPU with
// [Node.StartProcess].
type ProcessSpec struct {
	// PID identifies the process.
	PID uint32
	// MemoryBytes is what it allocates at start.
	MemoryBytes uint64
	// Env is its environment. With CUDA_MPS_PIPE_DIRECTORY naming a
	// directory where an MPS control daemon listens, the process is an MPS
	// client and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
	// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT limit it; otherwise (no variable, or
	// no daemon there: CUDA then runs without MPS) it is a plain process.
	Env map[string]string
	// Ordinal is the GPU's index among the process's visible devices, the
	// key of CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=2048M,1=...").
	Ordinal int
	// Cgroup is the process's cgroup as a path under the cgroup mount
	// (/sys/fs/cgroup/kubepods.slice/...), the namespace of the driver's
	// per-cgroup memory limits: the hard limits of it and of the cgroups
	// above it apply to the process's allocations. Empty: none apply.
	Cgroup string
}

// ProcessLimits is what limits a running process: zero values mean none.
type ProcessLimits struct {
	// MPS is true for an MPS client.
	MPS bool
	// PinnedMemoryBytes caps its device memory (an MPS client's
	// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT); 0 means the GPU's free memory.
	PinnedMemoryBytes uint64
	// ActiveThreadPercent is its share of the GPU's SMs; 0 means all.
	ActiveThreadPercent int
	// SMs is the number of SMs it can run on.
	SMs int
}

// GetComputeMode and SetComputeMode keep the GPU's compute mode, DEFAULT
// at first, in the state file. EXCLUSIVE_PROCESS admits one CUDA process,
// or MPS clients of one control daemon; PROHIBITED admits none.
func (d *Device) setComputeModeFuncs() {
	d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) {
		if r := d.lostOr("GetComputeMode"); r != nvml.SUCCESS {
			return 0, r
		}
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		return d.computeMode, nvml.SUCCESS
	}
	d.SetComputeModeFunc = func(mode nvml.ComputeMode) nvml.Return {
		if r := d.lostOr("SetComputeMode"); r != nvml.SUCCESS {
			return r
		}
		switch mode {
		case nvml.COMPUTEMODE_DEFAULT, nvml.COMPUTEMODE_PROHIBITED, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		case nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
			return nvml.ERROR_NOT_SUPPORTED // removed from drivers since CUDA 8
		default:
			return nvml.ERROR_INVALID_ARGUMENT
		}
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		d.computeMode = mode
		_ = d.node.saveStateLocked() // kept for StateErr
		return nvml.SUCCESS
	}
}

// StartProcess starts a simulated CUDA process on a whole GPU, as creating
// a context and allocating p.MemoryBytes would. It fails (wrapping the
// NVML code a caller can test) when the compute mode refuses it
// (ERROR_IN_USE), when the memory is not free or is above the process's
// pinned MPS limit or its cgroup's hard memory limit (ERROR_MEMORY), and
// for malformed MPS variables (ERROR_INVALID_ARGUMENT), naming the
// variable. Memory held by borrowers (cgroups above their soft limit) is
// not free to them: a process that stays within its cgroup's soft limit
// gets it, the driver evicting borrowers ([Node.Evictions]).
func (n *Node) StartProcess(index int, p ProcessSpec) error {
	d, err := n.device(index)
	if err != nil {
		return err
	}
	proc, err := newProcess(index, p)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return d.startLocked(p, proc)
}

// newProcess is the process p starts as on GPU index: an MPS client of
// the daemon its environment names, or a plain process.
func newProcess(index int, p ProcessSpec) (process, error) {
	proc, err := mpsClient(p)
	if err != nil {
		return process{}, fmt.Errorf("simnode: gpu %d: pid %d: %w", index, p.PID, err)
	}
	proc.memBytes, proc.gi, proc.ci, proc.cgroup = p.MemoryBytes, -1, -1, p.Cgroup
	if proc.limitBytes > 0 && p.MemoryBytes > proc.limitBytes {
		return process{}, fmt.Errorf("simnode: gpu %d: pid %d: %d bytes requested, above its pinned MPS limit of %d: %w", index, p.PID, p.MemoryBytes, proc.limitBytes, nvml.ERROR_MEMORY)
	}
	return proc, nil
}

// startLocked admits proc (started as p) on d.
func (d *Device) startLocked(p ProcessSpec, proc process) error {
	index := d.index
	if err := d.chargeLocked(p.Cgroup, p.MemoryBytes); err != nil {
		return fmt.Errorf("simnode: gpu %d: pid %d: %w", index, p.PID, err)
	}
	if err := d.admitLocked(proc.mps); err != nil {
		return fmt.Errorf("simnode: gpu %d: pid %d: %w", index, p.PID, err)
	}
	if free := d.memoryLocked().Free; p.MemoryBytes > free && !d.makeRoomLocked(p.PID, p.Cgroup, p.MemoryBytes, free) {
		return fmt.Errorf("simnode: gpu %d: %d bytes requested, %d free: %w", index, p.MemoryBytes, free, nvml.ERROR_MEMORY)
	}
	d.procs[p.PID] = proc
	return nil
}

// admitLocked applies the compute mode to a new process.
func (d *Device) admitLocked(mps bool) error {
	switch d.computeMode {
	case nvml.COMPUTEMODE_PROHIBITED:
		return fmt.Errorf("compute mode prohibited: %w", nvml.ERROR_IN_USE)
	case nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		for pid, p := range d.procs {
			// MPS clients share the one context of their daemon's server.
			if !mps || !p.mps {
				return fmt.Errorf("compute mode exclusive process, held by pid %d: %w", pid, nvml.ERROR_IN_USE)
			}
		}
	}
	return nil
}

// Allocate grows a running process's device memory by bytes, as cudaMalloc
// does: above an MPS client's pinned memory limit, above the hard memory
// limit of its cgroup (or of one above it), or above the GPU's (or MIG
// device's) free memory, it fails with ERROR_MEMORY and nothing is
// allocated; as with [Node.StartProcess], a process within its cgroup's
// soft limit gets memory that borrowers hold, the driver evicting them.
func (n *Node) Allocate(pid uint32, bytes uint64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, d := range n.devices {
		if p, ok := d.procs[pid]; ok {
			return d.allocateLocked(pid, p, bytes)
		}
	}
	return fmt.Errorf("simnode: allocate: no process %d", pid)
}

// allocateLocked is [Node.Allocate] of process p (pid) on d.
func (d *Device) allocateLocked(pid uint32, p process, bytes uint64) error {
	if p.limitBytes > 0 && p.memBytes+bytes > p.limitBytes {
		return fmt.Errorf("simnode: gpu %d: pid %d: %d more bytes would make %d, above its pinned MPS limit of %d: %w",
			d.index, pid, bytes, p.memBytes+bytes, p.limitBytes, nvml.ERROR_MEMORY)
	}
	free := d.memoryLocked().Free
	if p.gi >= 0 {
		free = d.migFreeLocked(p.gi)
	}
	if err := d.chargeLocked(p.cgroup, bytes); err != nil {
		return fmt.Errorf("simnode: gpu %d: pid %d: %w", d.index, pid, err)
	}
	if bytes > free && (p.gi >= 0 || !d.makeRoomLocked(pid, p.cgroup, bytes, free)) {
		return fmt.Errorf("simnode: gpu %d: pid %d: %d bytes requested, %d free: %w", d.index, pid, bytes, free, nvml.ERROR_MEMORY)
	}
	p.memBytes += bytes
	d.procs[pid] = p
	return nil
}

// migFreeLocked is the free memory of GPU instance gi.
func (d *Device) migFreeLocked(gi int) uint64 {
	inst, ok := d.gis[gi]
	if !ok {
		return 0
	}
	total := inst.info.MemorySizeMB << 20
	var used uint64
	for _, p := range d.procs {
		if p.gi == gi {
			used += p.memBytes
		}
	}
	if used >= total {
		return 0
	}
	return total - used
}

// Limits returns what limits a running process, and false when there is
// no such process.
func (n *Node) Limits(pid uint32) (ProcessLimits, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, d := range n.devices {
		if p, ok := d.procs[pid]; ok {
			l := ProcessLimits{MPS: p.mps, PinnedMemoryBytes: p.limitBytes, ActiveThreadPercent: p.threadPct, SMs: n.model.sms}
			if p.threadPct > 0 {
				// MPS rounds the SM share up: 1% still gets an SM.
				l.SMs = int(math.Ceil(float64(n.model.sms) * float64(p.threadPct) / 100))
			}
			return l, true
		}
	}
	return ProcessLimits{}, false
}

// mpsClient reads p's MPS environment: a plain process unless its pipe
// directory has a live control daemon.
func mpsClient(p ProcessSpec) (process, error) {
	dir := p.Env[EnvMPSPipeDirectory]
	if dir == "" || !daemonListens(dir) {
		return process{}, nil
	}
	proc := process{mps: true}
	if v, ok := p.Env[EnvMPSActiveThreadPercentage]; ok {
		pct, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || pct <= 0 || pct > 100 {
			return process{}, fmt.Errorf("%s=%q: want a percentage in (0, 100]: %w", EnvMPSActiveThreadPercentage, v, nvml.ERROR_INVALID_ARGUMENT)
		}
		proc.threadPct = int(math.Ceil(pct))
	}
	if v, ok := p.Env[EnvMPSPinnedDeviceMemLimit]; ok {
		limit, err := pinnedLimit(v, p.Ordinal)
		if err != nil {
			return process{}, fmt.Errorf("%s=%q: %w: %w", EnvMPSPinnedDeviceMemLimit, v, err, nvml.ERROR_INVALID_ARGUMENT)
		}
		proc.limitBytes = limit
	}
	return proc, nil
}

// daemonListens reports whether an MPS control daemon answers in dir.
func daemonListens(dir string) bool {
	c, err := net.DialTimeout("unix", filepath.Join(dir, mpsControlSocket), time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// pinnedLimit returns ordinal's limit in a "<ordinal>=<n>[K|M|G],..." list
// (binary units; no suffix means bytes), 0 when ordinal has none.
func pinnedLimit(v string, ordinal int) (uint64, error) {
	for _, item := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return 0, fmt.Errorf("%q: want <device ordinal>=<limit>", item)
		}
		ord, err := strconv.Atoi(k)
		if err != nil || ord < 0 {
			return 0, fmt.Errorf("%q: device ordinal %q is not a number", item, k)
		}
		shift := 0
		switch {
		case strings.HasSuffix(val, "G"):
			shift = 30
		case strings.HasSuffix(val, "M"):
			shift = 20
		case strings.HasSuffix(val, "K"):
			shift = 10
		}
		if shift > 0 {
			val = val[:len(val)-1]
		}
		n, err := strconv.ParseUint(val, 10, 64)
		if err != nil || n == 0 || n > math.MaxUint64>>shift {
			return 0, fmt.Errorf("%q: limit %q: want a positive size such as 2048M", item, val)
		}
		if ord == ordinal {
			return n << shift, nil
		}
	}
	return 0, nil
}
