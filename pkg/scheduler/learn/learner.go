package learn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gpud/gpud/pkg/predict"
)

// Defaults of [Config] fields left zero.
const (
	DefaultConfigMap       = "gpud-scheduler-runtimes"
	DefaultPersistInterval = 60 * time.Second
	DefaultQuantile        = 0.9
	DefaultMinSamples      = 5
)

// ErrConfig is matched by every [Config.Validate] error.
var ErrConfig = errors.New("learn: invalid config")

// maxStarted bounds the predictions kept for running pods (for the error
// metric); beyond it new ones are not kept.
const maxStarted = 200_000

// Config is what [New] needs. Zero values take the documented defaults.
type Config struct {
	// Client reads and writes the ConfigMap; required.
	Client kubernetes.Interface
	// Namespace (required) and Name (default [DefaultConfigMap]) locate
	// the ConfigMap holding what was learned.
	Namespace, Name string
	// SchedulerName selects the pods (spec.schedulerName) learned from;
	// required.
	SchedulerName string
	// PersistInterval is the least time between two writes of the
	// ConfigMap; default [DefaultPersistInterval], 1s to 1h.
	PersistInterval time.Duration
	// Quantile of a key's runtimes that Estimate answers, in (0, 1); high,
	// since backfill trusts a pod to end by its estimate. Default
	// [DefaultQuantile].
	Quantile float64
	// MinSamples is how many recent pods a key needs before it answers
	// (predict.Options.MinWeight); default [DefaultMinSamples].
	MinSamples float64
	// MaxKeys and HalfLife are predict.Options' (zero: its defaults).
	MaxKeys  int
	HalfLife float64
	// Log receives what is learned and persisted; nil discards.
	Log *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultConfigMap
	}
	if c.PersistInterval == 0 {
		c.PersistInterval = DefaultPersistInterval
	}
	if c.Quantile == 0 {
		c.Quantile = DefaultQuantile
	}
	if c.MinSamples == 0 {
		c.MinSamples = DefaultMinSamples
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) predictOptions() predict.Options {
	return predict.Options{MaxKeys: c.MaxKeys, HalfLife: c.HalfLife, MinWeight: c.MinSamples}
}

// Validate checks the config after defaults (all but Client, which New
// checks); every problem is reported, each matching [ErrConfig].
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrConfig))
	}
	if c.SchedulerName == "" {
		bad("scheduler name is required")
	}
	if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
		bad("ConfigMap namespace %q: %s", c.Namespace, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(c.Name); len(msgs) > 0 {
		bad("ConfigMap name %q: %s", c.Name, strings.Join(msgs, "; "))
	}
	if c.PersistInterval < time.Second || c.PersistInterval > time.Hour {
		bad("persist interval %s: want 1s to 1h", c.PersistInterval)
	}
	if !(c.Quantile > 0 && c.Quantile < 1) {
		bad("quantile %v: want a number in (0, 1), such as 0.9", c.Quantile)
	}
	if _, err := predict.New(c.predictOptions()); err != nil {
		bad("%v", err)
	}
	return errors.Join(errs...)
}

// Learner learns runtimes while it runs and answers estimates. Its
// methods are safe for concurrent use.
type Learner struct {
	cfg Config
	log *slog.Logger
	m   *bookMetrics

	// book holds the predictor and its ConfigMap; its mu guards the
	// fields below too.
	book
	// estimates caches Estimate per pod for gen.
	estimates    map[types.UID]time.Duration
	estimatesGen uint64
	// started is the prediction each running pod had when it was bound.
	started map[types.UID]time.Duration
}

// New checks cfg and returns a learner that knows nothing until Run
// loads the ConfigMap.
func New(cfg Config) (*Learner, error) {
	m := newRuntimeMetrics()
	l := &Learner{m: m, estimates: map[types.UID]time.Duration{}, started: map[types.UID]time.Duration{}}
	if err := l.book.setUp(&cfg, "runtimes", "--learn-runtimes", DataKey, m); err != nil {
		return nil, err
	}
	l.cfg, l.log = cfg, l.book.log
	l.reset = func() {
		clear(l.started)
		clear(l.estimates)
	}
	return l, nil
}

// Run loads what was learned from the ConfigMap, then learns and answers
// estimates until ctx ends, writing the ConfigMap at most every persist
// interval (when something was learned) and once more at the end. The
// scheduler runs it while it leads. Reading the ConfigMap is retried until
// it answers (a leader that started empty on a passing API error would
// overwrite what the previous one learned); corrupt data is logged,
// counted and replaced. Run returns nil when ctx ends.
func (l *Learner) Run(ctx context.Context) error { return l.run(ctx) }

// Estimate is the learned runtime of pod (the configured quantile of its
// most specific key with enough samples), or 0 when unknown or the learner
// is not running.
func (l *Learner) Estimate(pod *corev1.Pod) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.active {
		return 0
	}
	if l.estimatesGen != l.gen {
		clear(l.estimates)
		l.estimatesGen = l.gen
	}
	if d, ok := l.estimates[pod.UID]; ok {
		return d
	}
	d := l.predictLocked(pod)
	if len(l.estimates) < maxStarted {
		l.estimates[pod.UID] = d
	}
	return d
}

func (l *Learner) predictLocked(pod *corev1.Pod) time.Duration {
	pr, ok, err := l.p.Predict(Keys(pod), l.cfg.Quantile)
	if err != nil || !ok {
		return 0 // Keys are always valid; the quantile was validated
	}
	return time.Duration(pr.Seconds) * time.Second
}

// Handler is the handler for the scheduler's pod informer: it learns from
// the scheduler's pods that succeed, and remembers what was predicted for
// each when it was bound.
func (l *Learner) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(o, n any) {
			old, ok1 := o.(*corev1.Pod)
			pod, ok2 := n.(*corev1.Pod)
			if ok1 && ok2 {
				l.podUpdated(old, pod)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				l.mu.Lock()
				delete(l.started, pod.UID)
				l.mu.Unlock()
			}
		},
	}
}

func (l *Learner) podUpdated(old, pod *corev1.Pod) {
	if pod.Spec.SchedulerName != l.cfg.SchedulerName {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.active {
		return
	}
	if old.Spec.NodeName == "" && pod.Spec.NodeName != "" && len(l.started) < maxStarted {
		if d := l.predictLocked(pod); d > 0 {
			l.started[pod.UID] = d
		}
	}
	if pod.Status.Phase == corev1.PodFailed {
		delete(l.started, pod.UID)
		return
	}
	if old.Status.Phase == corev1.PodSucceeded || pod.Status.Phase != corev1.PodSucceeded {
		return
	}
	predicted, had := l.started[pod.UID]
	delete(l.started, pod.UID)
	d, ok := Runtime(pod)
	if !ok {
		l.log.Debug("succeeded pod without start and finish times", "pod", pod.Namespace+"/"+pod.Name)
		return
	}
	secs := min(max(int64(math.Ceil(d.Seconds())), 1), predict.MaxSeconds)
	if err := l.p.Observe(Keys(pod), secs); err != nil {
		l.log.Warn("runtime not learned", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return
	}
	l.gen++
	l.m.observations.Inc()
	l.m.keys.Set(float64(l.p.Len()))
	if had {
		l.m.errRatio.Observe(math.Abs(predicted.Seconds()-float64(secs)) / float64(secs))
	}
	l.log.Debug("runtime learned", "pod", pod.Namespace+"/"+pod.Name, "seconds", secs, "predicted_seconds", int64(predicted.Seconds()))
}
