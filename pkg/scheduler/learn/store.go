package learn

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/pkg/predict"
)

// DataKey is the ConfigMap key holding predict's JSON.
const DataKey = "runtimes.json"

// finalWriteTimeout bounds the write when Run ends.
const finalWriteTimeout = 5 * time.Second

// maxLoadRetry is the longest wait between two reads of the ConfigMap
// that failed for a reason other than its absence.
const maxLoadRetry = 30 * time.Second

// Run loads what was learned from the ConfigMap, then learns and answers
// estimates until ctx ends, writing the ConfigMap at most every persist
// interval (when something was learned) and once more at the end. The
// scheduler runs it while it leads. Reading the ConfigMap is retried until
// it answers (a leader that started empty on a passing API error would
// overwrite what the previous one learned); corrupt data is logged,
// counted and replaced. Run returns nil when ctx ends.
func (l *Learner) Run(ctx context.Context) error {
	if !l.load(ctx) {
		return nil
	}
	t := time.NewTicker(l.cfg.PersistInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.setActive(false)
			// Best effort: a write that a new leader's came before is
			// refused (the resourceVersion is stale) and dropped.
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalWriteTimeout)
			defer cancel()
			l.save(final, false)
			return nil
		case <-t.C:
			l.save(ctx, true)
		}
	}
}

func (l *Learner) setActive(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active = on
	clear(l.started)
	clear(l.estimates)
}

func (l *Learner) ref() string { return l.cfg.Namespace + "/" + l.cfg.Name }

// load reads the ConfigMap into the predictor and activates the learner;
// false when ctx ended first.
func (l *Learner) load(ctx context.Context) bool {
	delay := time.Second
	for {
		cm, err := l.cfg.Client.CoreV1().ConfigMaps(l.cfg.Namespace).Get(ctx, l.cfg.Name, metav1.GetOptions{})
		switch {
		case err == nil:
			p, derr := l.decode(cm)
			if derr != nil {
				l.m.failures.WithLabelValues("load").Inc()
				l.log.Error("learned runtimes unreadable: starting empty, the next write replaces them", "configmap", l.ref(), "err", derr)
			}
			l.install(p, cm.ResourceVersion, true)
			return true
		case apierrors.IsNotFound(err):
			l.log.Info("no learned runtimes yet: starting empty", "configmap", l.ref())
			l.install(nil, "", false)
			return true
		case ctx.Err() != nil:
			return false
		}
		l.m.failures.WithLabelValues("load").Inc()
		hint := ""
		if apierrors.IsForbidden(err) {
			hint = "grant get, create and update on this ConfigMap (deploy/scheduler/rbac.yaml), or run with --learn-runtimes=false"
		}
		l.log.Warn("learned runtimes not read: retrying, nothing learned meanwhile", "configmap", l.ref(), "err", err, "retry_in", delay, "hint", hint)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, maxLoadRetry)
	}
}

// decode is the predictor stored in cm, under this learner's options.
func (l *Learner) decode(cm *corev1.ConfigMap) (*predict.Predictor, error) {
	data, ok := cm.Data[DataKey]
	if !ok {
		return nil, fmt.Errorf("no key %s", DataKey)
	}
	p, err := predict.Unmarshal([]byte(data))
	if err != nil {
		return nil, err
	}
	return p.WithOptions(l.cfg.predictOptions())
}

// install makes p (nil: an empty predictor) what the learner knows, read
// at resourceVersion rv of the ConfigMap (exists: whether it does), and
// activates the learner.
func (l *Learner) install(p *predict.Predictor, rv string, exists bool) {
	if p == nil {
		p, _ = predict.New(l.cfg.predictOptions()) // validated by New
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.p, l.rv, l.exists, l.active = p, rv, exists, true
	l.gen++
	l.saved = l.gen
	l.m.keys.Set(float64(p.Len()))
	l.log.Info("learned runtimes loaded", "configmap", l.ref(), "keys", p.Len())
}

// save writes the predictor if it changed since the last write. With
// takeOver, a write refused because another writer came between (a
// previous leader's last write) is retried over it: this leader's state
// wins. Without, it is dropped.
func (l *Learner) save(ctx context.Context, takeOver bool) {
	l.mu.Lock()
	if l.gen == l.saved {
		l.mu.Unlock()
		return
	}
	data, err := l.p.Marshal()
	gen, rv, exists, keys := l.gen, l.rv, l.exists, l.p.Len()
	l.mu.Unlock()
	if err != nil {
		l.m.failures.WithLabelValues("save").Inc()
		l.log.Error("learned runtimes not written: too large; lower --learn-runtimes-max-keys", "configmap", l.ref(), "err", err)
		return
	}
	cms := l.cfg.Client.CoreV1().ConfigMaps(l.cfg.Namespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: l.cfg.Name, Namespace: l.cfg.Namespace, ResourceVersion: rv,
		Labels: map[string]string{"app.kubernetes.io/managed-by": l.cfg.SchedulerName}}, Data: map[string]string{DataKey: string(data)}}
	write := func() (*corev1.ConfigMap, error) {
		if !exists {
			return cms.Create(ctx, cm, metav1.CreateOptions{})
		}
		return cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	out, err := write()
	if takeOver && (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)) {
		cur, gerr := cms.Get(ctx, l.cfg.Name, metav1.GetOptions{})
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
		l.m.failures.WithLabelValues("save").Inc()
		l.log.Warn("learned runtimes not written", "configmap", l.ref(), "err", err)
		return
	}
	l.mu.Lock()
	l.rv, l.exists = out.ResourceVersion, true
	l.saved = max(l.saved, gen)
	l.mu.Unlock()
	l.m.lastSave.SetToCurrentTime()
	l.log.Debug("learned runtimes written", "configmap", l.ref(), "keys", keys, "bytes", len(data))
}
