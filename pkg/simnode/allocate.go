package simnode

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ProcessMemory is what process pid holds on GPU index, and false when it
// runs no simulated process there.
func (n *Node) ProcessMemory(index int, pid uint32) (uint64, bool) {
	d, err := n.device(index)
	if err != nil {
		return 0, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := d.procs[pid]
	return p.memBytes, ok
}

// AllocateOn is cudaMalloc of bytes by process spec.PID on GPU index, as
// one call: when the process already runs there it grows as
// [Node.Allocate] grows it; otherwise spec (its MemoryBytes set to bytes)
// starts on the GPU as [Node.StartProcess] starts it. The error wraps the
// driver's code: ERROR_MEMORY past the process's cgroup's hard limit, its
// pinned MPS limit or the GPU's free memory (borrowers are evicted first
// for a process within its soft limit), nothing allocated then. Calls
// for one PID are atomic against each other.
func (n *Node) AllocateOn(index int, spec ProcessSpec, bytes uint64) error {
	d, err := n.device(index)
	if err != nil {
		return err
	}
	spec.MemoryBytes = bytes
	proc, err := newProcess(index, spec) // may dial the MPS daemon: not under the lock
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if p, ok := d.procs[spec.PID]; ok {
		return d.allocateLocked(spec.PID, p, bytes)
	}
	return d.startLocked(spec, proc)
}

// Free releases bytes of what process pid holds on GPU index, as cudaFree
// does; bytes 0, or all it holds, ends the process there (its context
// goes). It returns what the process still holds, and fails with
// ERROR_NOT_FOUND when pid runs no simulated process on the GPU.
func (n *Node) Free(index int, pid uint32, bytes uint64) (uint64, error) {
	d, err := n.device(index)
	if err != nil {
		return 0, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := d.procs[pid]
	if !ok {
		return 0, fmt.Errorf("simnode: gpu %d: no process %d: %w", index, pid, nvml.ERROR_NOT_FOUND)
	}
	if bytes == 0 || bytes >= p.memBytes {
		delete(d.procs, pid)
		return 0, nil
	}
	p.memBytes -= bytes
	d.procs[pid] = p
	return p.memBytes, nil
}
