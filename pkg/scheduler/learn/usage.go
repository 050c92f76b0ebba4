package learn

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/gpud/gpud/pkg/predict"
)

// Defaults of the [Config] fields a [Usage] learner reads differently.
const (
	DefaultUsageConfigMap = "gpud-scheduler-usage"
	DefaultUsageQuantile  = 0.95
)

// UsageDataKey is the ConfigMap key holding predict's JSON of the learned
// GPU memory peaks (in MiB).
const UsageDataKey = "usage.json"

// MinPodSamples is how many telemetry samples a pod needs before its peak
// teaches: a pod seen once or twice may not have reached it.
const MinPodSamples = 3

// usageLevels is how many of [Keys] usage learns and answers under: the
// exact and the shape keys, not the queue alone, whose mix of workloads
// says little about one workload's memory.
const usageLevels = 2

// mib is the unit usage is learned in (predict keeps integers from 1 to
// predict.MaxSeconds: up to about 950 TiB here).
const mib = 1 << 20

// Usage learns, per workload key (the keys of [Keys]: namespace, queue,
// owner kind and name prefix, request shape), the distribution of the
// peak GPU memory its pods reached on a device, from the telemetry
// stream, and answers a conservative quantile of it ([Usage.PeakBytes]),
// for --overcommit. It runs like [Learner]: only while the scheduler
// leads, its state bounded (predict's LRU) and kept in its own ConfigMap.
//
// The scheduler reports each cycle's attributed memory per pod
// ([Usage.Record]); a pod teaches its peak when it succeeds or is deleted
// while running, after at least [MinPodSamples] samples. A failed pod
// does not teach (a crash or an out-of-memory kill says little about the
// memory the work needs). Its methods are safe for concurrent use.
type Usage struct {
	cfg Config
	log *slog.Logger
	m   *usageMetrics

	// book holds the predictor (peaks in MiB) and its ConfigMap; its mu
	// guards the fields below too.
	book
	// running is each pod's peak so far, by UID.
	running map[types.UID]*podPeak
	// answers caches PeakBytes per pod for gen.
	answers    map[types.UID]uint64
	answersGen uint64
}

type podPeak struct {
	keys    []string
	peakMiB int64
	samples int
	last    time.Time // of the last counted sample
	// predictedMiB is the learned peak the pod had when first sampled (0:
	// none), for the error metric.
	predictedMiB int64
}

// ForUsage is c with the usage learner's defaults: a zero Name is
// [DefaultUsageConfigMap], a zero Quantile [DefaultUsageQuantile]. Check
// a usage learner's config with c.ForUsage().Validate().
func (c Config) ForUsage() Config {
	if c.Name == "" {
		c.Name = DefaultUsageConfigMap
	}
	if c.Quantile == 0 {
		c.Quantile = DefaultUsageQuantile
	}
	return c
}

// NewUsage checks cfg and returns a usage learner that knows nothing
// until Run loads its ConfigMap. cfg is as for [New], except that a zero
// Name is [DefaultUsageConfigMap] and a zero Quantile
// [DefaultUsageQuantile].
func NewUsage(cfg Config) (*Usage, error) {
	cfg = cfg.ForUsage()
	m := newUsageMetrics()
	u := &Usage{m: m, running: map[types.UID]*podPeak{}, answers: map[types.UID]uint64{}}
	if err := u.book.setUp(&cfg, "usage", "--learn-usage", UsageDataKey, &m.bookMetrics); err != nil {
		return nil, err
	}
	u.cfg, u.log = cfg, u.book.log
	u.reset = func() {
		clear(u.running)
		clear(u.answers)
	}
	return u, nil
}

// Run loads what was learned, then learns and answers until ctx ends,
// writing the ConfigMap as [Learner.Run] does.
func (u *Usage) Run(ctx context.Context) error { return u.run(ctx) }

// Record is one telemetry sample of pod: the GPU memory its claim uses on
// one device, in bytes, as of at (when the node's newest message came).
// A sample counts towards [MinPodSamples] only when at is later than the
// pod's last counted one (cycles run more often than samples come); its
// bytes count towards the peak always. Pods of other schedulers, and
// samples while the learner is not running, are ignored.
func (u *Usage) Record(pod *corev1.Pod, bytes uint64, at time.Time) {
	if pod.Spec.SchedulerName != u.cfg.SchedulerName {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.active {
		return
	}
	r := u.running[pod.UID]
	if r == nil {
		if len(u.running) >= maxStarted {
			return
		}
		r = &podPeak{keys: Keys(pod)[:usageLevels]}
		if b, ok := u.predictLocked(r.keys); ok {
			r.predictedMiB = int64(b / mib)
		}
		u.running[pod.UID] = r
	}
	r.peakMiB = max(r.peakMiB, toMiB(bytes))
	if at.After(r.last) {
		r.samples++
		r.last = at
	}
}

// toMiB rounds bytes up to whole MiB, within predict's range.
func toMiB(bytes uint64) int64 {
	m := bytes / mib
	if bytes%mib != 0 {
		m++
	}
	return int64(min(max(m, 1), predict.MaxSeconds))
}

// PeakBytes is the learned peak GPU memory of pod's workload (the
// configured quantile of its most specific key with enough samples), and
// whether there is one (not while the learner is not running).
func (u *Usage) PeakBytes(pod *corev1.Pod) (uint64, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.active {
		return 0, false
	}
	if u.answersGen != u.gen {
		clear(u.answers)
		u.answersGen = u.gen
	}
	if b, ok := u.answers[pod.UID]; ok {
		return b, b > 0
	}
	b, _ := u.predictLocked(Keys(pod)[:usageLevels])
	if len(u.answers) < maxStarted {
		u.answers[pod.UID] = b
	}
	return b, b > 0
}

func (u *Usage) predictLocked(keys []string) (uint64, bool) {
	pr, ok, err := u.p.Predict(keys, u.cfg.Quantile)
	if err != nil || !ok {
		return 0, false // keys are always valid; the quantile was validated
	}
	return uint64(pr.Seconds) * mib, true
}

// Handler is the handler for the scheduler's pod informer: a pod of the
// scheduler that succeeds, or is deleted while not failed, teaches its
// peak; one that fails is forgotten.
func (u *Usage) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(o, n any) {
			old, ok1 := o.(*corev1.Pod)
			pod, ok2 := n.(*corev1.Pod)
			if !ok1 || !ok2 || old.Status.Phase == pod.Status.Phase {
				return
			}
			switch pod.Status.Phase {
			case corev1.PodSucceeded:
				u.finish(pod, true)
			case corev1.PodFailed:
				u.finish(pod, false)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				u.finish(pod, pod.Status.Phase != corev1.PodFailed)
			}
		},
	}
}

// finish ends pod's sampling; with teach, its peak is learned.
func (u *Usage) finish(pod *corev1.Pod, teach bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	r, ok := u.running[pod.UID]
	if !ok {
		return
	}
	delete(u.running, pod.UID)
	if !teach || !u.active || r.samples < MinPodSamples {
		return
	}
	if err := u.p.Observe(r.keys, r.peakMiB); err != nil {
		u.log.Warn("usage not learned", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return
	}
	u.gen++
	u.m.observations.Inc()
	u.m.keys.Set(float64(u.p.Len()))
	if r.predictedMiB > 0 {
		u.m.errRatio.Observe(math.Abs(float64(r.predictedMiB-r.peakMiB)) / float64(r.peakMiB))
		if r.peakMiB > r.predictedMiB {
			u.m.under.Inc()
		}
	}
	u.log.Debug("usage learned", "pod", pod.Namespace+"/"+pod.Name, "peak_mib", r.peakMiB, "samples", r.samples, "predicted_mib", r.predictedMiB)
}

// usageMetrics are the usage learner's: a learner's, and how often it
// predicted too low.
type usageMetrics struct {
	bookMetrics
	under prometheus.Counter
}

func newUsageMetrics() *usageMetrics {
	return &usageMetrics{
		bookMetrics: newBookMetrics("usage", metricHelp{
			errRatio:     "|predicted - actual| / actual peak GPU memory of the scheduler's pods that taught their peak and had a learned prediction when first sampled.",
			keys:         "Keys (workload descriptions) the GPU memory usage predictor holds.",
			observations: "Peak GPU memory of pods learned by the usage predictor.",
			state:        "learned usage's",
		}),
		under: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpud_scheduler_usage_underpredicted_total",
			Help: "Pods whose peak GPU memory exceeded the learned peak they had when first sampled (overcommit counted them too low).",
		}),
	}
}

// Collectors are the usage learner's metrics, for the scheduler's registry.
func (u *Usage) Collectors() []prometheus.Collector {
	return append(u.m.collectors(), u.m.under)
}
