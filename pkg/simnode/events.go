package simnode

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// supportedEvents are the event types a simulated GPU delivers.
const supportedEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError |
	nvml.EventTypeDoubleBitEccError | nvml.EventTypePState | nvml.EventTypeClock

// eventSet is an NVML event set: devices register event types into it and
// Wait returns them in order.
type eventSet struct {
	mock.EventSet
	node *Node
	ch   chan nvml.EventData
	regs map[*Device]uint64 // guarded by node.mu
}

func (n *Node) newEventSet() *eventSet {
	s := &eventSet{node: n, ch: make(chan nvml.EventData, 1024), regs: map[*Device]uint64{}}
	s.WaitFunc = func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
		t := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
		defer t.Stop()
		select {
		case e := <-s.ch:
			return e, nvml.SUCCESS
		case <-t.C:
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
	s.FreeFunc = func() nvml.Return {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.eventSets, s)
		return nvml.SUCCESS
	}
	fillUnsupported(&s.EventSet)
	n.mu.Lock()
	n.eventSets[s] = struct{}{}
	n.mu.Unlock()
	return s
}

func (d *Device) setEventFuncs() {
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return supportedEvents, d.lostOr("GetSupportedEventTypes")
	}
	d.RegisterEventsFunc = func(types uint64, set nvml.EventSet) nvml.Return {
		if r := d.lostOr("RegisterEvents"); r != nvml.SUCCESS {
			return r
		}
		s, ok := set.(*eventSet)
		if !ok || s.node != d.node {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		if types&^uint64(supportedEvents) != 0 {
			return nvml.ERROR_NOT_SUPPORTED
		}
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		s.regs[d] |= types
		return nvml.SUCCESS
	}
}

// emitLocked delivers an event to every set that registered for its type on
// the device. A full set drops the event, as the driver's queue does.
func (d *Device) emitLocked(typ uint64, data uint64, gi, ci uint32) {
	for s := range d.node.eventSets {
		if s.regs[d]&typ == 0 {
			continue
		}
		select {
		case s.ch <- nvml.EventData{Device: d, EventType: typ, EventData: data, GpuInstanceId: gi, ComputeInstanceId: ci}:
		default:
		}
	}
}
