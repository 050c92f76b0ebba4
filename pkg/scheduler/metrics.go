package scheduler

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// Results of a scheduling attempt (gpud_scheduler_schedule_attempts_total).
const (
	resultScheduled     = "scheduled"
	resultUnschedulable = "unschedulable"
	resultError         = "error"
)

// metrics are the scheduler's Prometheus metrics, on its own registry.
// gpuMemoryEvery is how often the GPU memory gauges are worked out.
const gpuMemoryEvery = time.Second

type metrics struct {
	// gpuMemoryAt is when the GPU memory gauges were last worked out.
	gpuMemoryAt time.Time
	reg         *prometheus.Registry
	attempts    *prometheus.CounterVec
	cycle       prometheus.Histogram
	podLatency  prometheus.Histogram
	pending     *prometheus.GaugeVec
	oldest      *prometheus.GaugeVec
	preempts    prometheus.Counter
	victims     prometheus.Counter
	binds       prometheus.Counter
	conflicts   prometheus.Counter
	rollbacks   prometheus.Counter
	gpuMemory   *prometheus.GaugeVec
	skipped     *prometheus.GaugeVec
	leader      prometheus.Gauge
	queueUsed   *prometheus.GaugeVec
	queueGuar   *prometheus.GaugeVec
	queueLimit  *prometheus.GaugeVec
	// quotaMu guards quotas, the queues setQuotas last exported.
	quotaMu sync.Mutex
	quotas  []jobs.Queue
	// telemetryNodes are the nodes whose stream fed the last cycle.
	telemetryNodes prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_scheduler_schedule_attempts_total",
			Help: "Pods decided, by result: scheduled (bound), unschedulable (left pending), error (a write failed).",
		}, []string{"result"}),
		cycle: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpud_scheduler_cycle_duration_seconds",
			Help:    "Duration of one decision cycle: snapshot, decision, evictions and pending-status writes (binds run apart, gpud_scheduler_binds_in_flight).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		podLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpud_scheduler_pod_scheduling_duration_seconds",
			Help:    "Time from a pod's creation to its Binding by this scheduler.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 18),
		}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpud_scheduler_pending_pods",
			Help: "Pods left pending by the last cycle, by reason code.",
		}, []string{"reason"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpud_scheduler_pending_oldest_seconds",
			Help: "Age of the oldest pod left pending by the last cycle, per queue (the pod's " + plan.QueueLabel + " label; empty for pods without one), in seconds; no series for a queue with no pending pod.",
		}, []string{"queue"}),
		preempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpud_scheduler_preemptions_total",
			Help: "Pending pods for which victims were evicted.",
		}),
		victims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpud_scheduler_preemption_victims_total",
			Help: "Pods evicted to make room for pending pods.",
		}),
		binds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpud_scheduler_binds_total",
			Help: "Pods bound to a node.",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpud_scheduler_claim_write_conflicts_total",
			Help: "ResourceClaim status writes refused for a stale resourceVersion (the pod is decided again).",
		}),
		rollbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpud_scheduler_claim_rollbacks_total",
			Help: "ResourceClaim allocations undone because their pod or gang could not be bound.",
		}),
		gpuMemory: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpud_scheduler_gpu_memory_bytes",
			Help: "GPU memory of gpud's devices per GPU model, allocated or free, as the last cycle saw it.",
		}, []string{"model", "state"}),
		skipped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpud_scheduler_skipped_objects",
			Help: "API objects the last view left out (malformed or unknown), by kind.",
		}, []string{"kind"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpud_scheduler_leader",
			Help: "1 while this replica holds the lease (or runs without leader election).",
		}),
		queueUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpud_scheduler_queue_used",
			Help: "What a queue (--queues or a Queue object) holds after the last decision, per resource (cpu_milli, memory_mib, gpu_milli, gpu_memory_mib, mig_slices).",
		}, []string{"queue", "resource"}),
		queueGuar: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpud_scheduler_queue_guaranteed",
			Help: "A queue's guarantee (--queues or a Queue object, updated when it changes), per resource; absent when zero.",
		}, []string{"queue", "resource"}),
		queueLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpud_scheduler_queue_limit",
			Help: "A queue's limit (--queues or a Queue object, updated when it changes), per resource; absent when unlimited.",
		}, []string{"queue", "resource"}),
		telemetryNodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpud_scheduler_telemetry_nodes",
			Help: "Nodes whose telemetry stream fed the last decision cycle (open and not stale); the others are placed on ResourceSlices and claims alone.",
		}),
	}
	m.reg.MustRegister(m.telemetryNodes, m.attempts, m.cycle, m.podLatency, m.pending, m.oldest, m.preempts, m.victims, m.binds,
		m.conflicts, m.rollbacks, m.gpuMemory, m.skipped, m.leader, m.queueUsed, m.queueGuar, m.queueLimit,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// setPendingOldest exports, per queue, the age at now of the oldest pod
// in pending or waiting (from its creation time): a pod backing off is
// still pending to its user. Pods deferred beyond --max-pending are the
// newest of the cycle and not in pending.
func (m *metrics) setPendingOldest(now time.Time, pending []plan.Pending, waiting ...*plan.Pod) {
	oldest := map[string]time.Time{}
	note := func(p *plan.Pod) {
		if p == nil || p.Created.IsZero() {
			return
		}
		if t, ok := oldest[p.Queue]; !ok || p.Created.Before(t) {
			oldest[p.Queue] = p.Created
		}
	}
	for _, pd := range pending {
		note(pd.Pod)
	}
	for _, p := range waiting {
		note(p)
	}
	m.oldest.Reset()
	for q, t := range oldest {
		m.oldest.WithLabelValues(q).Set(max(0, now.Sub(t).Seconds()))
	}
}

// resourceValues names the fields of jobs.Resources for metric labels.
func resourceValues(r jobs.Resources) [5]struct {
	name  string
	value int64
} {
	return [5]struct {
		name  string
		value int64
	}{{"cpu_milli", r.CPUMilli}, {"memory_mib", r.MemoryMiB}, {"gpu_milli", r.GPUMilli}, {"gpu_memory_mib", r.GPUMemoryMiB}, {"mig_slices", r.MIGSlices}}
}

// setQuotas exports the queues' guarantees and limits (zero fields left
// out). Called with each cycle's tree (the --queues file's, or the Queue
// objects' over it), it rewrites the series only when a queue, a
// guarantee or a limit changed: a removed queue's series go.
func (m *metrics) setQuotas(queues []jobs.Queue) {
	m.quotaMu.Lock()
	defer m.quotaMu.Unlock()
	if m.quotas != nil && slices.EqualFunc(m.quotas, queues, func(a, b jobs.Queue) bool {
		return a.Name == b.Name && a.Quota.Guaranteed == b.Quota.Guaranteed && a.Quota.Limit == b.Quota.Limit
	}) {
		return
	}
	m.quotas = slices.Clone(queues)
	if m.quotas == nil {
		m.quotas = []jobs.Queue{}
	}
	m.queueGuar.Reset()
	m.queueLimit.Reset()
	for _, q := range queues {
		for _, r := range resourceValues(q.Quota.Guaranteed) {
			if r.value > 0 {
				m.queueGuar.WithLabelValues(q.Name, r.name).Set(float64(r.value))
			}
		}
		for _, r := range resourceValues(q.Quota.Limit) {
			if r.value > 0 {
				m.queueLimit.WithLabelValues(q.Name, r.name).Set(float64(r.value))
			}
		}
	}
}

// setQueueUsage exports what the decider counted per queue.
func (m *metrics) setQueueUsage(use map[string]jobs.Resources) {
	if use == nil {
		return
	}
	m.queueUsed.Reset()
	for q, u := range use {
		for _, r := range resourceValues(u) {
			m.queueUsed.WithLabelValues(q, r.name).Set(float64(r.value))
		}
	}
}

// observeView sets the GPU memory and skip gauges from a cycle's view and
// the claims it was built from.
func (m *metrics) observeView(v *view.View, claims []*resourceapi.ResourceClaim, skips []view.Skip) {
	// GPU memory walks every allocated claim: at most once a second
	// (scrapes come every few seconds; cycles, one pod at a time, every
	// few tens of milliseconds).
	if now := time.Now(); now.Sub(m.gpuMemoryAt) >= gpuMemoryEvery {
		m.gpuMemoryAt = now
		total, used := gpuMemory(v, claims)
		m.gpuMemory.Reset()
		for model, t := range total {
			u := min(used[model], t)
			m.gpuMemory.WithLabelValues(model, "allocated").Set(float64(u))
			m.gpuMemory.WithLabelValues(model, "free").Set(float64(t - u))
		}
	}
	m.skipped.Reset()
	for _, s := range skips {
		m.skipped.WithLabelValues(s.Kind).Inc()
	}
}

// gpuMemory sums GPU memory per model: total over GPUs that publish a
// whole device, and what claims took (a whole GPU: all of it; a share: its
// consumed memory; a MIG device: its memory capacity).
func gpuMemory(v *view.View, claims []*resourceapi.ResourceClaim) (total, used map[string]int64) {
	total, used = map[string]int64{}, map[string]int64{}
	for _, n := range v.Nodes() {
		for _, g := range n.GPUs {
			total[g.Model] += g.MemoryBytes
		}
	}
	seen := map[string]bool{}
	for _, c := range claims {
		if c == nil || c.Status.Allocation == nil || seen[string(c.UID)] {
			continue
		}
		seen[string(c.UID)] = true
		for _, r := range c.Status.Allocation.Devices.Results {
			n := v.Node(r.Pool)
			if r.Driver != view.DriverName || n == nil {
				continue
			}
			d := n.Devices[r.Device]
			if d == nil || d.GPU < 0 || d.GPU >= len(n.GPUs) {
				continue
			}
			g := n.GPUs[d.GPU]
			switch {
			case r.ShareID != nil:
				q := r.ConsumedCapacity[view.CapacityMemory]
				used[g.Model] += q.Value()
			case d.MIG:
				q := d.Capacity[view.CapacityMemory].Value
				used[g.Model] += q.Value()
			default:
				used[g.Model] += g.MemoryBytes
			}
		}
	}
	return total, used
}
