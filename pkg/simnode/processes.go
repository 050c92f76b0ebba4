package simnode

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// AddProcess starts a simulated compute process on a whole GPU, holding
// memBytes of its framebuffer: [Node.StartProcess] without MPS. It fails
// when the memory is not free, as cudaMalloc would, or when the compute
// mode refuses another process.
func (n *Node) AddProcess(index int, pid uint32, memBytes uint64) error {
	return n.StartProcess(index, ProcessSpec{PID: pid, MemoryBytes: memBytes})
}

// AddMIGProcess starts a simulated process on the MIG device with the given
// UUID.
func (n *Node) AddMIGProcess(migUUID string, pid uint32, memBytes uint64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, d := range n.devices {
		for _, h := range d.migHandlesLocked() {
			if h.ci.uuid != migUUID {
				continue
			}
			var used uint64
			for _, p := range d.procs {
				if p.gi == h.ci.gi.id {
					used += p.memBytes
				}
			}
			if used+memBytes > h.ci.gi.info.MemorySizeMB<<20 {
				return fmt.Errorf("simnode: MIG device %s: %d bytes requested, %d free: %w", migUUID, memBytes, h.ci.gi.info.MemorySizeMB<<20-used, nvml.ERROR_MEMORY)
			}
			d.procs[pid] = process{memBytes: memBytes, gi: h.ci.gi.id, ci: h.ci.id}
			return nil
		}
	}
	return fmt.Errorf("%w: MIG device %s", ErrUnknownGPU, migUUID)
}

// RemoveProcess ends a simulated process wherever it runs; it reports false
// when no such process exists.
func (n *Node) RemoveProcess(pid uint32) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, d := range n.devices {
		if _, ok := d.procs[pid]; ok {
			delete(d.procs, pid)
			return true
		}
	}
	return false
}

// ResetGPU performs a GPU reset (nvidia-smi -r): a pending MIG mode takes
// effect. It fails while processes run, as the driver refuses then.
func (n *Node) ResetGPU(index int) error {
	d, err := n.device(index)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if d.lost {
		return fmt.Errorf("simnode: reset gpu %d: %w", index, nvml.ERROR_GPU_IS_LOST)
	}
	if len(d.procs) > 0 {
		return fmt.Errorf("simnode: reset gpu %d: %d processes running: %w", index, len(d.procs), nvml.ERROR_IN_USE)
	}
	d.migCurrent = d.migPending
	if d.migCurrent == nvml.DEVICE_MIG_DISABLE {
		d.gis = map[int]*gpuInstance{}
	}
	return n.saveStateLocked()
}
