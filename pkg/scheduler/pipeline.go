package scheduler

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/rules"
)

// bindJob is one unit of binds (a gang, or one pod) handed to the bind
// workers by a cycle.
type bindJob struct {
	// ctx is the cycle's (the term's): when it ends, a job not started
	// is dropped and one under way stops writing and rolls back.
	ctx  context.Context
	unit []plan.Bind
	// vols are the unit's volumes reserved by the cycle, one per bind
	// (nil entries: nothing to bind); binder, when set instead, reserves
	// and binds them in the worker (a binder that cannot reserve apart).
	vols   []*rules.VolumeReservation
	binder volumeBinder
}

// bindQueue runs bind jobs in at most max goroutines, apart from the
// decision cycles, as kube-scheduler's binding cycles run apart from its
// scheduling cycle: a cycle hands its units over and decides again at
// once, on the assumed state (assumeCache), while the API writes of
// earlier units (claim finalizer and status, volume binding, Binding) are
// under way. Jobs run in the order they came; a goroutine ends when the
// queue is empty, so an idle queue holds none. Safe for concurrent use.
type bindQueue struct {
	run func(bindJob)
	max int

	mu      sync.Mutex
	queue   []bindJob
	running int
	wg      sync.WaitGroup

	inFlight prometheus.Gauge
}

func newBindQueue(workers int, run func(bindJob), reg prometheus.Registerer) *bindQueue {
	q := &bindQueue{run: run, max: workers, inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gpud_scheduler_binds_in_flight",
		Help: "Units of binds (a gang counts as one) decided and not yet written: queued or being written by the bind workers.",
	})}
	reg.MustRegister(q.inFlight)
	return q
}

// add queues a job, starting a worker if fewer than max run.
func (q *bindQueue) add(j bindJob) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = append(q.queue, j)
	q.inFlight.Inc()
	if q.running < q.max {
		q.running++
		q.wg.Add(1)
		go q.work()
	}
}

func (q *bindQueue) work() {
	defer q.wg.Done()
	for {
		q.mu.Lock()
		if len(q.queue) == 0 {
			q.running--
			q.mu.Unlock()
			return
		}
		j := q.queue[0]
		q.queue[0] = bindJob{}
		q.queue = q.queue[1:]
		q.mu.Unlock()
		q.run(j)
		q.inFlight.Dec()
	}
}

// wait returns once every job queued so far is done and every worker has
// ended (the jobs of an ended context end quickly: see bindJob.ctx).
func (q *bindQueue) wait() { q.wg.Wait() }

// idle reports whether no job is queued or running.
func (q *bindQueue) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running == 0 && len(q.queue) == 0
}
