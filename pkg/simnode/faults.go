package simnode

import (
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// XidGPUFallenOffBus is the Xid the driver logs when a GPU drops off the bus.
const XidGPUFallenOffBus = 79

// fault makes an NVML call fail or stall: after `after` successful calls, the
// next `times` calls return ret (times < 0: forever), each after delay.
type fault struct {
	gpu   int // -1: any GPU
	after int
	times int
	ret   nvml.Return
	delay time.Duration
	hit   chan<- struct{}
	calls int
}

// FaultSpec says how an injected fault behaves; see [Node.InjectFault].
type FaultSpec struct {
	// GPU limits the fault to one GPU index; nil means every GPU.
	GPU *int
	// After lets this many calls succeed first.
	After int
	// Times is how many calls fail; 0 means one, negative means all.
	Times int
	// Return is the error the calls get; SUCCESS with a Delay only stalls.
	Return nvml.Return
	// Delay stalls each affected call, as a slow driver does, until it
	// passes or the node is closed ([Node.Close]).
	Delay time.Duration
	// Hit, when set, receives a value (if it has room) each time the fault
	// hits, before the Delay: a test waits on it instead of polling.
	Hit chan<- struct{}
}

// InjectFault makes the NVML operation op fail or stall. op is the method
// name (GetMemoryInfo, GetPowerUsage, SetMigMode, CreateGpuInstance,
// CreateComputeInstance, DestroyGpuInstance, DestroyComputeInstance, ...).
// A later InjectFault for the same op replaces it; ClearFaults removes all.
func (n *Node) InjectFault(op string, s FaultSpec) {
	f := &fault{gpu: -1, after: s.After, times: s.Times, ret: s.Return, delay: s.Delay, hit: s.Hit}
	if s.GPU != nil {
		f.gpu = *s.GPU
	}
	if f.times == 0 {
		f.times = 1
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults[op] = f
}

// ClearFaults removes every injected fault.
func (n *Node) ClearFaults() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults = map[string]*fault{}
}

// fault returns the injected result of one call of op on a GPU.
func (n *Node) fault(op string, gpu int) nvml.Return {
	n.mu.Lock()
	f := n.faults[op]
	if f == nil || (f.gpu >= 0 && f.gpu != gpu) {
		n.mu.Unlock()
		return nvml.SUCCESS
	}
	f.calls++
	hit := f.calls > f.after && (f.times < 0 || f.calls <= f.after+f.times)
	delay, ret, signal := f.delay, f.ret, f.hit
	n.mu.Unlock()
	if !hit {
		return nvml.SUCCESS
	}
	if signal != nil {
		select {
		case signal <- struct{}{}:
		default:
		}
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-n.done:
			return nvml.ERROR_UNINITIALIZED
		}
	}
	return ret
}

func (n *Node) device(index int) (*Device, error) {
	if index < 0 || index >= len(n.devices) {
		return nil, fmt.Errorf("%w: index %d (node has %d)", ErrUnknownGPU, index, len(n.devices))
	}
	return n.devices[index], nil
}

// withDevice runs f on GPU index under the node's lock.
func (n *Node) withDevice(index int, f func(d *Device)) error {
	d, err := n.device(index)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	f(d)
	return nil
}

// wholeGPU is the GPU/compute instance ID of an event not tied to a MIG
// device.
const wholeGPU = 0xFFFFFFFF

// InjectXid reports an Xid error on a GPU through the event sets registered
// for EventTypeXidCriticalError.
func (n *Node) InjectXid(index int, xid uint64) error {
	return n.withDevice(index, func(d *Device) {
		d.emitLocked(nvml.EventTypeXidCriticalError, xid, wholeGPU, wholeGPU)
	})
}

// InjectMIGXid reports an Xid attributed to the GPU instance and compute
// instance of the MIG device with the given UUID.
func (n *Node) InjectMIGXid(migUUID string, xid uint64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, d := range n.devices {
		for _, h := range d.migHandlesLocked() {
			if h.ci.uuid == migUUID {
				d.emitLocked(nvml.EventTypeXidCriticalError, xid, uint32(h.ci.gi.id), uint32(h.ci.id))
				return nil
			}
		}
	}
	return fmt.Errorf("%w: MIG device %s", ErrUnknownGPU, migUUID)
}

// InjectECC counts one ECC error and delivers its event: double-bit errors
// are uncorrectable and leave a row remapping pending.
func (n *Node) InjectECC(index int, doubleBit bool) error {
	return n.withDevice(index, func(d *Device) {
		if doubleBit {
			d.dbe++
			d.emitLocked(nvml.EventTypeDoubleBitEccError, 0, wholeGPU, wholeGPU)
		} else {
			d.sbe++
			d.emitLocked(nvml.EventTypeSingleBitEccError, 0, wholeGPU, wholeGPU)
		}
	})
}

// FallOffBus makes a GPU lost: Xid 79 is delivered, then every call but its
// identity (index, minor, UUID, PCI info) returns ERROR_GPU_IS_LOST. A lost
// GPU stays lost for the life of the Node, as it does until a reboot.
func (n *Node) FallOffBus(index int) error {
	return n.withDevice(index, func(d *Device) {
		d.emitLocked(nvml.EventTypeXidCriticalError, XidGPUFallenOffBus, wholeGPU, wholeGPU)
		d.lost = true
	})
}

// GPUIndex returns the index of the GPU whose UUID is uuid, for the hooks
// that take an index; an unknown UUID is an error wrapping ErrUnknownGPU.
func (n *Node) GPUIndex(uuid string) (int, error) {
	for i, d := range n.devices {
		if d.uuid == uuid {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: %q (node %s has %d GPUs)", ErrUnknownGPU, uuid, n.name, len(n.devices))
}

// GPUs is the number of GPUs of the node.
func (n *Node) GPUs() int { return len(n.devices) }
