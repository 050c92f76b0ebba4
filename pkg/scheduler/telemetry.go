package scheduler

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/pkg/gputel"
	"github.com/gpud/gpud/pkg/scheduler/view"
	"github.com/gpud/gpud/pkg/stream"
)

// DefaultTelemetryStaleIntervals is how many of its stream intervals a
// node's newest message may be old before its telemetry is left out of
// decisions (the node then counts as having no stream).
const DefaultTelemetryStaleIntervals = 3

// TelemetrySource is the telemetry stream's server ([stream.Server]).
type TelemetrySource interface {
	// Telemetry returns the nodes whose stream is open and whose newest
	// message is at most staleIntervals intervals old. The result, maps
	// included, is the caller's: the scheduler attributes pods' memory to
	// claims in it.
	Telemetry(now time.Time, staleIntervals int) map[string]*gputel.Node
}

var _ TelemetrySource = (*stream.Server)(nil)

// Wake asks for a decision cycle now; the telemetry server calls it when a
// device's health changes, so that the device is left out of placements
// within one stream interval. It never blocks.
func (s *Scheduler) Wake() { s.poke() }

// telemetry is the snapshot's Snapshot.Telemetry: the stream's nodes,
// with the memory of each pod's processes attributed to the pod's claim
// on that node where it has exactly one (the agent knows pods, the
// scheduler claims). Nil without a source.
func (s *Scheduler) telemetry(now time.Time, claims []*resourceapi.ResourceClaim) map[string]*gputel.Node {
	if s.cfg.Telemetry == nil {
		return nil
	}
	nodes := s.cfg.Telemetry.Telemetry(now, s.cfg.TelemetryStaleIntervals)
	s.m.telemetryNodes.Set(float64(len(nodes)))
	if len(nodes) == 0 {
		return nil
	}
	type podNode struct {
		pod  types.UID
		node string
	}
	// The claims of this driver each pod holds, by the node they are on;
	// for usage learning, the pod of each claim one pod holds.
	var held map[podNode][]string
	var podOf map[string]*corev1.Pod
	for _, c := range claims {
		a := c.Status.Allocation
		if a == nil || len(c.Status.ReservedFor) == 0 {
			continue
		}
		var node string
		for _, r := range a.Devices.Results {
			if r.Driver == view.DriverName {
				node = r.Pool
				break
			}
		}
		if _, ok := nodes[node]; !ok {
			continue
		}
		for _, ref := range c.Status.ReservedFor {
			if ref.Resource == "pods" {
				if held == nil {
					held = map[podNode][]string{}
				}
				k := podNode{ref.UID, node}
				held[k] = append(held[k], string(c.UID))
			}
		}
		if s.cfg.Usage != nil && len(c.Status.ReservedFor) == 1 && c.Status.ReservedFor[0].Resource == "pods" {
			ref := c.Status.ReservedFor[0]
			if pod, err := s.pods.Pods(c.Namespace).Get(ref.Name); err == nil && pod.UID == ref.UID {
				if podOf == nil {
					podOf = map[string]*corev1.Pod{}
				}
				podOf[string(c.UID)] = pod
			}
		}
	}
	// The source's maps are the caller's: attribution writes into them.
	for name, n := range nodes {
		for uuid, d := range n.Devices {
			for pod, b := range d.PodMemoryBytes {
				cs := held[podNode{types.UID(pod), name}]
				if len(cs) != 1 {
					continue // unknown pod, or several claims: unattributed
				}
				if _, reported := d.ClaimMemoryBytes[cs[0]]; reported {
					continue
				}
				if d.ClaimMemoryBytes == nil {
					d.ClaimMemoryBytes = map[string]uint64{}
				}
				d.ClaimMemoryBytes[cs[0]] += b
			}
			s.learnUsage(&d, podOf, n.Received)
			n.Devices[uuid] = d
		}
	}
	return nodes
}

// learnUsage records each claim's attributed memory on a device (as of
// at, when the node's newest message came) for the usage learner and,
// with Config.OvercommitLearned, counts the claim at its workload's
// learned peak where that is higher than measured (the device's measured
// use grows by the difference).
func (s *Scheduler) learnUsage(dt *gputel.Device, podOf map[string]*corev1.Pod, at time.Time) {
	u := s.cfg.Usage
	if u == nil || len(podOf) == 0 {
		return
	}
	for claim, b := range dt.ClaimMemoryBytes {
		pod := podOf[claim]
		if pod == nil {
			continue
		}
		u.Record(pod, b, at)
		if !s.cfg.OvercommitLearned {
			continue
		}
		if peak, ok := u.PeakBytes(pod); ok && peak > b {
			dt.ClaimMemoryBytes[claim] = peak
			dt.MemoryUsedBytes += peak - b
		}
	}
}
