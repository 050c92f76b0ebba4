package learn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/pkg/predict"
)

// DataKey is the ConfigMap key holding predict's JSON of the learned
// runtimes; [UsageDataKey] that of the learned GPU memory peaks.
const DataKey = "runtimes.json"

// finalWriteTimeout bounds the write when Run ends.
const finalWriteTimeout = 5 * time.Second

// maxLoadRetry is the longest wait between two reads of the ConfigMap
// that failed for a reason other than its absence.
const maxLoadRetry = 30 * time.Second

// book is what one learner learned (a predict.Predictor) and where it is
// kept: a ConfigMap, read when run starts, written at most every interval
// (when something was learned) and once more when run ends. Its mu also
// guards its owner's per-pod state, which reset (called under mu) clears
// each time the book becomes active or inactive. Runtimes and usage each
// have their own book and ConfigMap.
type book struct {
	client          kubernetes.Interface
	namespace, name string
	// dataKey is the ConfigMap key; managedBy the scheduler's name, on
	// the ConfigMap's managed-by label.
	dataKey, managedBy string
	// what names the learned state in logs ("runtimes", "usage"); flag
	// is its flags' prefix ("--learn-runtimes"), for hints.
	what, flag string
	opts       predict.Options
	interval   time.Duration
	log        *slog.Logger
	failures   *prometheus.CounterVec // by op: load, save
	lastSave   prometheus.Gauge
	keys       prometheus.Gauge
	reset      func()

	mu sync.Mutex
	p  *predict.Predictor
	// active is true while run runs and has loaded the ConfigMap: only
	// then does the owner learn and answer.
	active bool
	// gen counts changes of p; saved is the gen last written.
	gen, saved uint64
	// rv is the ConfigMap's resourceVersion as last read or written (""
	// when unknown); exists is whether it exists.
	rv     string
	exists bool
}

// setUp checks cfg, fills in its defaults, and makes b the book of one
// learner: what names its state in logs and messages ("runtimes", also
// its log component), flag its flags' prefix ("--learn-runtimes"),
// dataKey its ConfigMap key, m its metrics.
func (b *book) setUp(cfg *Config, what, flag, dataKey string, m *bookMetrics) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Client == nil {
		return fmt.Errorf("client is required: %w", ErrConfig)
	}
	*cfg = cfg.withDefaults()
	p, err := predict.New(cfg.predictOptions())
	if err != nil {
		return fmt.Errorf("learn: %w", err)
	}
	log := cfg.Log.With("component", what)
	*b = book{client: cfg.Client, namespace: cfg.Namespace, name: cfg.Name, dataKey: dataKey, managedBy: cfg.SchedulerName,
		what: what, flag: flag, opts: cfg.predictOptions(), interval: cfg.PersistInterval, log: log,
		failures: m.failures, lastSave: m.lastSave, keys: m.keys, p: p}
	return nil
}

// run loads what was learned from the ConfigMap, then writes the ConfigMap at
// most every interval (when something was learned) and once more at the
// end, until ctx ends. Reading the ConfigMap is retried until it answers
// (a leader that started empty on a passing API error would overwrite
// what the previous one learned); corrupt data is logged, counted and
// replaced. It returns nil when ctx ends.
func (b *book) run(ctx context.Context) error {
	if !b.load(ctx) {
		return nil
	}
	t := time.NewTicker(b.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			b.setActive(false)
			// Best effort: a write that a new leader's came before is
			// refused (the resourceVersion is stale) and dropped.
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteTimeout)
			defer cancel()
			b.save(final, false)
			return nil
		case <-t.C:
			b.save(ctx, true)
		}
	}
}

func (b *book) setActive(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.active = on
	if b.reset != nil {
		b.reset()
	}
}

func (b *book) ref() string { return b.namespace + "/" + b.name }

// load reads the ConfigMap into the predictor and activates the book;
// false when ctx ended first.
func (b *book) load(ctx context.Context) bool {
	delay := time.Second
	for {
		cm, err := b.client.CoreV1().ConfigMaps(b.namespace).Get(ctx, b.name, metav1.GetOptions{})
		switch {
		case err == nil:
			p, derr := b.decode(cm)
			if derr != nil {
				b.failures.WithLabelValues("load").Inc()
				b.log.Error("learned state unreadable: starting empty, the next write replaces it", "learned", b.what, "configmap", b.ref(), "err", derr)
			}
			b.install(p, cm.ResourceVersion, true)
			return true
		case apierrors.IsNotFound(err):
			b.log.Info("nothing learned yet: starting empty", "learned", b.what, "configmap", b.ref())
			b.install(nil, "", false)
			return true
		case ctx.Err() != nil:
			return false
		}
		b.failures.WithLabelValues("load").Inc()
		hint := ""
		if apierrors.IsForbidden(err) {
			hint = "grant get, create and update on this ConfigMap (deploy/scheduler/rbac.yaml), or run with " + b.flag + "=false"
		}
		b.log.Warn("learned state not read: retrying, nothing learned meanwhile", "learned", b.what, "configmap", b.ref(), "err", err, "retry_in", delay, "hint", hint)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, maxLoadRetry)
	}
}

// decode is the predictor stored in cm, under this book's options.
func (b *book) decode(cm *corev1.ConfigMap) (*predict.Predictor, error) {
	data, ok := cm.Data[b.dataKey]
	if !ok {
		return nil, fmt.Errorf("no key %s", b.dataKey)
	}
	p, err := predict.Unmarshal([]byte(data))
	if err != nil {
		return nil, err
	}
	return p.WithOptions(b.opts)
}

// install makes p (nil: an empty predictor) what the book holds, read
// at resourceVersion rv of the ConfigMap (exists: whether it does), and
// activates it.
func (b *book) install(p *predict.Predictor, rv string, exists bool) {
	if p == nil {
		p, _ = predict.New(b.opts) // validated by the owner's New
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.p, b.rv, b.exists, b.active = p, rv, exists, true
	if b.reset != nil {
		b.reset()
	}
	b.gen++
	b.saved = b.gen
	b.keys.Set(float64(p.Len()))
	b.log.Info("learned state loaded", "learned", b.what, "configmap", b.ref(), "keys", p.Len())
}

// save writes the predictor if it changed since the last write. With
// takeOver, a write refused because another writer came between (a
// previous leader's last write) is retried over it: this leader's state
// wins. Without, it is dropped.
func (b *book) save(ctx context.Context, takeOver bool) {
	b.mu.Lock()
	if b.gen == b.saved {
		b.mu.Unlock()
		return
	}
	data, err := b.p.Marshal()
	gen, rv, exists, keys := b.gen, b.rv, b.exists, b.p.Len()
	b.mu.Unlock()
	if err != nil {
		b.failures.WithLabelValues("save").Inc()
		b.log.Error("learned state not written: too large; lower "+b.flag+"-max-keys", "learned", b.what, "configmap", b.ref(), "err", err)
		return
	}
	cms := b.client.CoreV1().ConfigMaps(b.namespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: b.name, Namespace: b.namespace, ResourceVersion: rv,
		Labels: map[string]string{"app.kubernetes.io/managed-by": b.managedBy}}, Data: map[string]string{b.dataKey: string(data)}}
	write := func() (*corev1.ConfigMap, error) {
		if !exists {
			return cms.Create(ctx, cm, metav1.CreateOptions{})
		}
		return cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	out, err := write()
	if takeOver && (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)) {
		cur, gerr := cms.Get(ctx, b.name, metav1.GetOptions{})
		switch {
		case gerr == nil:
			cm.ResourceVersion, exists = cur.ResourceVersion, true
			out, err = write()
		case apierrors.IsNotFound(gerr):
			cm.ResourceVersion, exists = "", false
			out, err = write()
		default:
			err = errors.Join(err, gerr)
		}
	}
	if err != nil {
		b.failures.WithLabelValues("save").Inc()
		b.log.Warn("learned state not written", "learned", b.what, "configmap", b.ref(), "err", err)
		return
	}
	b.mu.Lock()
	b.rv, b.exists = out.ResourceVersion, true
	b.saved = max(b.saved, gen)
	b.mu.Unlock()
	b.lastSave.SetToCurrentTime()
	b.log.Debug("learned state written", "learned", b.what, "configmap", b.ref(), "keys", keys, "bytes", len(data))
}
