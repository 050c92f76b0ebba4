package scheduler

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
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
// lets them all back at once. It also remembers which pods were tried:
// a pod never tried is new, and new pods are always considered
// (plan.Pod.Retry). Safe for concurrent use (informer handlers flush it).
type backoff struct {
	mu sync.Mutex
	m  map[types.UID]backoffEntry
}

type backoffEntry struct {
	attempts int
	until    time.Time
}

func newBackoff() *backoff { return &backoff{m: map[types.UID]backoffEntry{}} }

// failed records that a cycle at now left the pod pending.
func (b *backoff) failed(uid types.UID, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.m[uid]
	e.attempts++
	d := initialBackoff << min(e.attempts-1, 10)
	e.until = now.Add(min(d, maxBackoff))
	b.m[uid] = e
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

// prune forgets every pod keep rejects.
func (b *backoff) prune(keep func(types.UID) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for uid := range b.m {
		if !keep(uid) {
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
