package scheduler

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// Backoff of pods a cycle left pending, as kube-scheduler's queue does it
// (podInitialBackoffDuration, podMaxBackoffDuration).
const (
	initialBackoff = time.Second
	maxBackoff     = 10 * time.Second
)

// backoff keeps this scheduler's pods that cycles left pending out of the
// next cycles for a while (1 s, doubling per attempt, at most 10 s), so
// that pods which cannot fit do not take every cycle; a cluster event that
// can make room (a pod or claim gone, a node or ResourceSlice changed)
// lets them back at once: all of them, except the pods that only
// kube-scheduler's plugins refused (NodePorts, InterPodAffinity, ...),
// which come back on the events those plugins' queueing hints accept (a
// pod or node event: the pod holding the port deleted, a node added). It also remembers which pods were tried:
// a pod never tried is new, and new pods are always considered
// (plan.Pod.Retry). Safe for concurrent use (informer handlers flush it).
type backoff struct {
	mu sync.Mutex
	m  map[types.UID]backoffEntry
}

type backoffEntry struct {
	attempts int
	until    time.Time
	// pod and rejectedBy, when set, say the pod was refused on every node
	// by these kube-scheduler plugins only: then only events their
	// queueing hints accept end its wait ([backoff.wake]).
	pod        *corev1.Pod
	rejectedBy []string
}

func newBackoff() *backoff { return &backoff{m: map[types.UID]backoffEntry{}} }

// failed records that a cycle at now left the pod pending.
func (b *backoff) failed(uid types.UID, now time.Time) { b.failedBy(uid, now, nil, nil) }

// failedBy is failed for a pod that kube-scheduler's plugins rejectedBy
// refused on every node (pod is its object then; nil rejectedBy: the pod
// failed for other reasons too).
func (b *backoff) failedBy(uid types.UID, now time.Time, pod *corev1.Pod, rejectedBy []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.m[uid]
	e.attempts++
	d := initialBackoff << min(e.attempts-1, 10)
	e.until = now.Add(min(d, maxBackoff))
	e.pod, e.rejectedBy = pod, rejectedBy
	if rejectedBy == nil {
		e.pod = nil
	}
	b.m[uid] = e
}

// wake ends the wait of the backed-off pods an event may help and
// returns how many: those that only kube-scheduler's plugins refused when
// mayHelp says so for their object and plugins (kube-scheduler's queueing
// hints), and, with others, every pod that failed for other reasons too
// (devices, queues, CPU: an event that may free room).
func (b *backoff) wake(mayHelp func(pod *corev1.Pod, rejectedBy []string) bool, others bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for uid, e := range b.m {
		if e.until.IsZero() || (e.rejectedBy == nil && !others) || (e.rejectedBy != nil && !mayHelp(e.pod, e.rejectedBy)) {
			continue
		}
		e.until = time.Time{}
		b.m[uid] = e
		n++
	}
	return n
}

// tried reports whether a cycle has left the pod pending before.
func (b *backoff) tried(uid types.UID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.m[uid]
	return ok
}

// waiting reports whether the pod is backing off at now.
func (b *backoff) waiting(uid types.UID, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.m[uid]
	return ok && now.Before(e.until)
}

// flush ends every pod's wait (the pods stay tried).
func (b *backoff) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for uid, e := range b.m {
		e.until = time.Time{}
		b.m[uid] = e
	}
}

// forget drops the pod: it is new again (changed, bound or gone).
func (b *backoff) forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, uid)
}

// prune forgets every pod keep rejects, except the ones still backing
// off at now: a bind worker backs off a pod whose bind failed while a
// cycle that saw it assumed bound (not pending) was running.
func (b *backoff) prune(keep func(types.UID) bool, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for uid, e := range b.m {
		if !keep(uid) && !now.Before(e.until) {
			delete(b.m, uid)
		}
	}
}

// next is the earliest end of a wait after now; false when no pod waits.
func (b *backoff) next(now time.Time) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var t time.Time
	for _, e := range b.m {
		if e.until.After(now) && (t.IsZero() || e.until.Before(t)) {
			t = e.until
		}
	}
	return t, !t.IsZero()
}

// wake ends the waits an event may end (backoff.wake, with the rules'
// queueing hints) and pokes the loop. events are what happened, old and
// new the object before and after (nil where there is none).
func (s *Scheduler) wake(events []fwk.ClusterEvent, old, new any) {
	if len(events) > 0 {
		s.backoff.wake(func(pod *corev1.Pod, by []string) bool { return s.rules.MayHelp(pod, by, events, old, new) }, true)
	}
	s.poke()
}

// podDeleted wakes the pods a pod's deletion may help (an assigned pod's
// ports, affinity and spread count are gone with it).
func (s *Scheduler) podDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		s.backoff.flush()
		s.poke()
		return
	}
	ev := framework.EventUnscheduledPodDelete
	if pod.Spec.NodeName != "" {
		ev = framework.EventAssignedPodDelete
	}
	s.wake([]fwk.ClusterEvent{ev}, pod, nil)
}

// nodeChange is the cluster events a node update makes
// (kube-scheduler's NodeSchedulingPropertiesChange: none for a heartbeat).
func nodeChange(o, n any) []fwk.ClusterEvent {
	old, ok1 := o.(*corev1.Node)
	node, ok2 := n.(*corev1.Node)
	if !ok1 || !ok2 {
		return []fwk.ClusterEvent{{Resource: fwk.Node, ActionType: fwk.Update}}
	}
	return framework.NodeSchedulingPropertiesChange(node, old)
}

// nodeEvents wake the pods that kube-scheduler's plugins alone refused
// only where the plugins' queueing hints say a node event may help; a
// node deleted wakes every pod (gpud's devices on it are gone).
func (s *Scheduler) nodeEvents() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(n any) { s.wake([]fwk.ClusterEvent{{Resource: fwk.Node, ActionType: fwk.Add}}, nil, n) },
		UpdateFunc: func(o, n any) { s.wake(nodeChange(o, n), o, n) },
		DeleteFunc: func(any) { s.backoff.flush(); s.poke() },
	}
}
