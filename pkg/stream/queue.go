package stream

import (
	"math"
	"sync"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
)

// queue is the agent's bounded buffer between the producers (the sampler
// tick, health and Xid callbacks) and the one sender. Samples are a ring:
// when it is full the oldest is dropped (a newer sweep supersedes it).
// Events are never dropped: when maxEvents are queued, the queue is
// compacted to one event per (kind, device) carrying the newest state and
// the count of the events it stands for, so the scheduler still learns
// every device's latest health and how many Xids it had. Compaction keeps
// at most one event per (kind, device), so with maxEvents above the
// node's devices times kinds the queue stays bounded.
type queue struct {
	maxSamples, maxEvents int

	mu      sync.Mutex
	samples []*telemetryv1.Samples // oldest first
	events  []*telemetryv1.Event   // oldest first
	// droppedSamples and mergedEvents count what overflow cost.
	droppedSamples, mergedEvents uint64
	wake                         chan struct{}
}

func newQueue(maxSamples, maxEvents int) *queue {
	return &queue{maxSamples: maxSamples, maxEvents: maxEvents, wake: make(chan struct{}, 1)}
}

func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pushSamples queues s, dropping the oldest sample when full; it returns
// how many were dropped.
func (q *queue) pushSamples(s *telemetryv1.Samples) int {
	q.mu.Lock()
	dropped := 0
	for len(q.samples) >= q.maxSamples {
		q.samples[0] = nil
		q.samples = q.samples[1:]
		dropped++
	}
	q.samples = append(q.samples, s)
	q.droppedSamples += uint64(dropped)
	q.mu.Unlock()
	q.signal()
	return dropped
}

// pushEvent queues ev; when the queue is full it compacts it first, and
// returns how many events compaction merged.
func (q *queue) pushEvent(ev *telemetryv1.Event) int {
	q.mu.Lock()
	merged := 0
	if len(q.events) >= q.maxEvents {
		merged = q.compactLocked()
	}
	q.events = append(q.events, ev)
	q.mu.Unlock()
	q.signal()
	return merged
}

// requeueEvents puts events sent but not acknowledged (a stream that
// broke) back in front, compacting if that overflows.
func (q *queue) requeueEvents(evs []*telemetryv1.Event) {
	if len(evs) == 0 {
		return
	}
	q.mu.Lock()
	q.events = append(append(make([]*telemetryv1.Event, 0, len(evs)+len(q.events)), evs...), q.events...)
	if len(q.events) > q.maxEvents {
		q.compactLocked()
	}
	q.mu.Unlock()
	q.signal()
}

type eventKey struct {
	kind   telemetryv1.Event_Kind
	device string
}

// compactLocked merges the queued events into one per (kind, device),
// each at the place of its key's newest event, and returns how many
// events were merged away.
func (q *queue) compactLocked() int {
	type acc struct {
		count  uint64
		health telemetryv1.Health
		reason string
		last   int
	}
	accs := map[eventKey]*acc{}
	for i, ev := range q.events {
		k := eventKey{ev.GetKind(), ev.GetDeviceUuid()}
		a := accs[k]
		if a == nil {
			a = &acc{}
			accs[k] = a
		}
		a.count += uint64(max(ev.GetCount(), 1))
		if ev.GetHealth() != telemetryv1.Health_HEALTH_UNSPECIFIED {
			// An ignored Xid (no health) does not undo an earlier change.
			a.health, a.reason = ev.GetHealth(), ev.GetReason()
		}
		a.last = i
	}
	out := make([]*telemetryv1.Event, 0, len(accs))
	for i, ev := range q.events {
		a := accs[eventKey{ev.GetKind(), ev.GetDeviceUuid()}]
		if a.last != i {
			continue
		}
		if a.count > 1 || ev.GetHealth() != a.health {
			ev = cloneEvent(ev)
			ev.Count = uint32(min(a.count, math.MaxUint32))
			ev.Health, ev.Reason = a.health, a.reason
		}
		out = append(out, ev)
	}
	merged := len(q.events) - len(out)
	q.mergedEvents += uint64(merged)
	clear(q.events)
	q.events = out
	return merged
}

func cloneEvent(ev *telemetryv1.Event) *telemetryv1.Event {
	return &telemetryv1.Event{Kind: ev.GetKind(), DeviceUuid: ev.GetDeviceUuid(), AtUnixNanos: ev.GetAtUnixNanos(), Xid: ev.GetXid(),
		Health: ev.GetHealth(), Reason: ev.GetReason(), Devices: ev.GetDevices(), Count: ev.GetCount()}
}

// pop returns the next message to send, events first; ok is false when
// the queue is empty.
func (q *queue) pop() (ev *telemetryv1.Event, s *telemetryv1.Samples, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.events) > 0 {
		ev = q.events[0]
		q.events[0] = nil
		q.events = q.events[1:]
		return ev, nil, true
	}
	if len(q.samples) > 0 {
		s = q.samples[0]
		q.samples[0] = nil
		q.samples = q.samples[1:]
		return nil, s, true
	}
	return nil, nil, false
}

// lens reports the queued samples and events.
func (q *queue) lens() (samples, events int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.samples), len(q.events)
}
