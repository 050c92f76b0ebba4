package scheduler

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// CodeQueueRefused is the reason code of a pod that may not use the queue
// it names or its namespace is bound to (Config.QueueSet): it is not
// passed to the decider.
const CodeQueueRefused = "queue-refused"

// cycleQueues is one cycle's queues, reservations and pod→queue function
// (nil: the pod's label).
func (s *snapshotter) cycleQueues() ([]jobs.Queue, []jobs.Reservation, func(*corev1.Pod) (string, error)) {
	if s.queueSet == nil {
		return s.queues, s.reservations, nil
	}
	return s.queueSet()
}

// setQueue sets p.Queue from of (nil: leaves the label's); on a refusal
// p.Queue is "" and the refusal is returned.
func setQueue(p *plan.Pod, of func(*corev1.Pod) (string, error)) error {
	if of == nil {
		return nil
	}
	q, err := of(p.Pod)
	p.Queue = q
	return err
}

// reportQueues exports the cycle's guarantees and limits (they change
// with the Queue objects) and passes Config.QueueStatus the plan's queue
// usage and the pods waiting per queue: left pending by the plan, or
// backing off.
func (s *Scheduler) reportQueues(sn *snapshot, p plan.Plan) {
	s.m.setQuotas(sn.Queues)
	if s.cfg.QueueStatus == nil {
		return
	}
	pending := map[string]int{}
	for _, pd := range p.Pending {
		if pd.Pod != nil && pd.Pod.Queue != "" {
			pending[pd.Pod.Queue]++
		}
	}
	for _, w := range sn.waiting {
		if w.Queue != "" {
			pending[w.Queue]++
		}
	}
	s.cfg.QueueStatus(p.QueueUsage, pending)
}
