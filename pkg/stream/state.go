package stream

import (
	"fmt"
	"maps"
	"time"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
	"github.com/gpud/gpud/pkg/gputel"
)

// nodeState is the newest state one node streamed, kept while its stream
// is open.
type nodeState struct {
	gen      uint64      // the stream that owns it
	end      func(error) // ends that stream, with why
	received time.Time   // by ServerConfig.Now
	last     time.Time   // by the wall clock, for the idle check
	interval time.Duration
	devices  map[string]*deviceState
}

type deviceState struct {
	unhealthy bool
	reason    string
	memUsed   uint64
	memTotal  uint64
	smUtil    float64
	claimMem  map[string]uint64
	podMem    map[string]uint64 // by pod UID, from attributed processes
}

func healthOf(h telemetryv1.Health, reason string) (unhealthy bool, why string) {
	switch h {
	case telemetryv1.Health_HEALTH_UNHEALTHY, telemetryv1.Health_HEALTH_LOST:
		if reason == "" {
			reason = h.String()
		}
		return true, reason
	}
	return false, ""
}

// setDevices replaces the node's device list, keeping the measured values
// of devices that stay; it reports whether any device's health changed.
func (n *nodeState) setDevices(devs []*telemetryv1.Device) bool {
	old := n.devices
	n.devices = make(map[string]*deviceState, len(devs))
	changed := false
	for _, d := range devs {
		ds := &deviceState{}
		if o, ok := old[d.GetUuid()]; ok {
			*ds = *o
		}
		ds.memTotal = d.GetMemoryTotalBytes()
		un, why := healthOf(d.GetHealth(), d.GetHealthReason())
		if o, ok := old[d.GetUuid()]; (ok && o.unhealthy != un) || (!ok && un) {
			changed = true
		}
		ds.unhealthy, ds.reason = un, why
		n.devices[d.GetUuid()] = ds
	}
	for u, o := range old {
		if _, ok := n.devices[u]; !ok && o.unhealthy {
			changed = true
		}
	}
	return changed
}

// hello starts the state of node for stream gen, ending an older stream
// of the same node.
func (s *Server) hello(node string, gen uint64, end func(error), h *telemetryv1.Hello) {
	n := &nodeState{gen: gen, end: end, received: s.cfg.Now(), last: time.Now(), interval: time.Duration(h.GetIntervalMillis()) * time.Millisecond}
	s.mu.Lock()
	old := s.nodes[node]
	if old != nil {
		n.devices = old.devices
		old.end(errReplaced)
	}
	changed := n.setDevices(h.GetDevices())
	s.nodes[node] = n
	s.mu.Unlock()
	if changed {
		s.wake()
	}
}

// gone drops the node's state if stream gen still owns it.
func (s *Server) gone(node string, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.nodes[node]; n != nil && n.gen == gen {
		delete(s.nodes, node)
	}
}

// apply validates one message of stream gen and folds it into the node's
// state; known is the stream's device set, replaced by layout events.
func (s *Server) apply(node string, gen uint64, m *telemetryv1.AgentMessage, known *map[string]bool) error {
	now := s.cfg.Now()
	switch k := m.GetKind().(type) {
	case *telemetryv1.AgentMessage_Samples:
		if err := validateSamples(k.Samples, *known); err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		n := s.nodes[node]
		if n == nil || n.gen != gen {
			return nil // replaced by a newer stream; it ends soon
		}
		n.received, n.last = now, time.Now()
		for _, d := range k.Samples.GetDevices() {
			ds := n.devices[d.GetUuid()]
			if ds == nil {
				continue
			}
			if d.MemoryUsedBytes != nil {
				ds.memUsed = d.GetMemoryUsedBytes()
			}
			if d.SmUtilPercent != nil {
				ds.smUtil = d.GetSmUtilPercent()
			}
			ds.claimMem, ds.podMem = nil, nil
			for _, c := range d.GetClaims() {
				if ds.claimMem == nil {
					ds.claimMem = map[string]uint64{}
				}
				ds.claimMem[c.GetClaimUid()] += c.GetUsedBytes()
			}
			for _, p := range d.GetProcesses() {
				if p.GetPodUid() == "" {
					continue
				}
				if ds.podMem == nil {
					ds.podMem = map[string]uint64{}
				}
				ds.podMem[p.GetPodUid()] += p.GetUsedBytes()
			}
		}
		return nil
	case *telemetryv1.AgentMessage_Event:
		next, err := validateEvent(k.Event, *known, s.cfg.MaxDevices)
		if err != nil {
			return err
		}
		*known = next
		changed := s.event(node, gen, k.Event, now)
		if changed {
			s.wake()
		}
		return nil
	case *telemetryv1.AgentMessage_Hello:
		return invalid("a second hello on one stream")
	default:
		return invalid("message %d has no kind", m.GetSeq())
	}
}

// event folds a validated event in; it reports a health change.
func (s *Server) event(node string, gen uint64, ev *telemetryv1.Event, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[node]
	if n == nil || n.gen != gen {
		return false
	}
	n.received, n.last = now, time.Now()
	s.m.events.WithLabelValues(ev.GetKind().String()).Inc()
	switch ev.GetKind() {
	case telemetryv1.Event_KIND_MIG_LAYOUT, telemetryv1.Event_KIND_SHARING:
		if len(ev.GetDevices()) > 0 {
			return n.setDevices(ev.GetDevices())
		}
		return false
	}
	ds := n.devices[ev.GetDeviceUuid()]
	if ds == nil || ev.GetHealth() == telemetryv1.Health_HEALTH_UNSPECIFIED {
		return false
	}
	reason := ev.GetReason()
	if reason == "" && ev.GetKind() == telemetryv1.Event_KIND_XID {
		reason = fmt.Sprintf("Xid %d", ev.GetXid())
	}
	un, why := healthOf(ev.GetHealth(), reason)
	changed := ds.unhealthy != un
	ds.unhealthy, ds.reason = un, why
	return changed
}

// Telemetry returns the state of every node whose stream is open and
// whose newest message is at most staleIntervals of its intervals old
// (plus a second for scheduling noise). The result is the caller's.
func (s *Server) Telemetry(now time.Time, staleIntervals int) map[string]*gputel.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*gputel.Node, len(s.nodes))
	for name, n := range s.nodes {
		if now.Sub(n.received) > time.Duration(staleIntervals)*n.interval+time.Second {
			continue
		}
		nt := &gputel.Node{Received: n.received, Interval: n.interval, Devices: make(map[string]gputel.Device, len(n.devices))}
		for u, d := range n.devices {
			nt.Devices[u] = gputel.Device{Unhealthy: d.unhealthy, HealthReason: d.reason, MemoryUsedBytes: d.memUsed,
				MemoryTotalBytes: d.memTotal, SMUtilPercent: d.smUtil, ClaimMemoryBytes: maps.Clone(d.claimMem), PodMemoryBytes: maps.Clone(d.podMem)}
		}
		out[name] = nt
	}
	return out
}

// ages returns each open node's time since its newest message.
func (s *Server) ages(now time.Time) map[string]time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Duration, len(s.nodes))
	for name, n := range s.nodes {
		out[name] = now.Sub(n.received)
	}
	return out
}
