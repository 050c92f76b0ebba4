package agentevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	recordutil "k8s.io/client-go/tools/record/util"

	"github.com/gpud/gpud/internal/wait"
	"github.com/prometheus/client_golang/prometheus"
)

// ReportingController is the Events' reportingController.
const ReportingController = "gpud-agent"

// maxNoteBytes is the API server's limit on an Event's note.
const maxNoteBytes = 1024

// Config configures a [Recorder].
type Config struct {
	// Client writes the Events and reads the Node's UID. Required.
	Client kubernetes.Interface
	// NodeName is this node: the object of node events and the Events'
	// reportingInstance. Required.
	NodeName string
	// Limits bound the events written; zero values take the defaults.
	Limits Limits
	// Metrics, when set, gets gpud_kube_events_total.
	Metrics prometheus.Registerer
	// Log may be nil.
	Log *slog.Logger
	// NodeRetry is the wait between reads of the Node's UID; zero means
	// 10s.
	NodeRetry time.Duration
	// Now is the clock of the rate limits and the events' times; nil
	// means time.Now.
	Now func() time.Time
}

// queueLen bounds the events waiting to be written; past it they are
// dropped (counted), so a slow API server never blocks a component.
const queueLen = 256

// writeTimeout bounds one Event write.
const writeTimeout = 10 * time.Second

// Recorder writes the agent's Events. Its methods are safe for concurrent
// use, never block on the API server, and do nothing on a nil *Recorder.
//
// It writes each event it lets through as its own Event, instead of
// client-go's tools/events broadcaster: that one folds an event into an
// earlier one of the same object, reason and action for minutes, keeping
// the first note, so a GPU's second MIG change within minutes showed its
// first layout, and a second Xid the first one. The rate limits bound the
// writes instead.
type Recorder struct {
	cfg    Config
	limit  *limiter
	counts *prometheus.CounterVec
	queue  chan *eventsv1.Event
	// lastNano makes event names unique: the last name's nanoseconds.
	lastNano atomic.Int64

	mu      sync.Mutex
	nodeUID types.UID
}

// New checks cfg and returns a recorder; events are written once Run runs.
func New(cfg Config) (*Recorder, error) {
	var errs []error
	if cfg.Client == nil {
		errs = append(errs, errors.New("agentevents: Client is required"))
	}
	if cfg.NodeName == "" {
		errs = append(errs, errors.New("agentevents: NodeName is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.NodeRetry <= 0 {
		cfg.NodeRetry = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Recorder{cfg: cfg, limit: newLimiter(cfg.Limits), queue: make(chan *eventsv1.Event, queueLen)}
	r.counts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpud_kube_events_total",
		Help: "Kubernetes Events the agent wrote (result written), dropped by its rate limits (rate_limited), dropped because the write queue was full (queue_full), or refused by the API server (failed), by reason.",
	}, []string{"reason", "result"})
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(r.counts); err != nil {
			return nil, fmt.Errorf("agentevents: register metrics: %w", err)
		}
	}
	return r, nil
}

// Run reads the Node's UID, so that node events show in `kubectl describe
// node` (retried until it is read, while events are written without it),
// and writes the queued Events until ctx ends. It returns nil then.
func (r *Recorder) Run(ctx context.Context) error {
	go r.readNodeUID(ctx)
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-r.queue:
			wctx, cancel := context.WithTimeout(ctx, writeTimeout)
			_, err := r.cfg.Client.EventsV1().Events(e.Namespace).Create(wctx, e, metav1.CreateOptions{})
			cancel()
			switch {
			case err != nil && ctx.Err() != nil:
				return nil
			case err != nil:
				r.counts.WithLabelValues(e.Reason, "failed").Inc()
				if !failing {
					r.cfg.Log.Warn("event not written, later failures are logged at debug", "reason", e.Reason, "kind", e.Regarding.Kind, "name", e.Regarding.Name, "err", err)
				}
				r.cfg.Log.Debug("event not written", "reason", e.Reason, "kind", e.Regarding.Kind, "name", e.Regarding.Name, "err", err)
				failing = true
			default:
				r.counts.WithLabelValues(e.Reason, "written").Inc()
				failing = false
			}
		}
	}
}

// readNodeUID reads the Node until it has its UID or ctx ends.
func (r *Recorder) readNodeUID(ctx context.Context) {
	warned := false
	for {
		rctx, cancel := context.WithTimeout(ctx, writeTimeout)
		n, err := r.cfg.Client.CoreV1().Nodes().Get(rctx, r.cfg.NodeName, metav1.GetOptions{})
		cancel()
		if err == nil {
			r.mu.Lock()
			r.nodeUID = n.UID
			r.mu.Unlock()
			return
		}
		if !warned {
			r.cfg.Log.Warn("node not read, node events go without its uid until it is", "node", r.cfg.NodeName, "err", err)
			warned = true
		}
		if !wait.Sleep(ctx, r.cfg.NodeRetry) {
			return
		}
	}
}

// podRef is a pod, or one of its containers; UID may be empty when
// unknown, but `kubectl describe pod` shows only events that carry it.
func podRef(namespace, name, uid, container string) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: name, UID: types.UID(uid)}
	if container != "" {
		ref.FieldPath = "spec.containers{" + container + "}" // the kubelet's form
	}
	return ref
}

// nodeRef is the node, with fieldPath naming the GPU an event is about
// (so events of different GPUs are told apart, and aggregated apart).
func (r *Recorder) nodeRef(gpuUUID string) *corev1.ObjectReference {
	r.mu.Lock()
	uid := r.nodeUID
	r.mu.Unlock()
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: r.cfg.NodeName, UID: uid}
	if gpuUUID != "" {
		ref.FieldPath = "gpus{" + gpuUUID + "}"
	}
	return ref
}

// emit queues one event unless its object's and reason's rate limit, or
// the node's, is spent, or the queue is full.
func (r *Recorder) emit(ref *corev1.ObjectReference, eventType, reason, action, note string) {
	key := ref.Kind + "/" + ref.Namespace + "/" + ref.Name + "/" + ref.FieldPath + "/" + reason
	now := r.cfg.Now()
	if !r.limit.allow(key, now) {
		r.counts.WithLabelValues(reason, "rate_limited").Inc()
		r.cfg.Log.Debug("event rate limited", "reason", reason, "kind", ref.Kind, "namespace", ref.Namespace, "name", ref.Name)
		return
	}
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault // where cluster-scoped objects' events go
	}
	e := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: recordutil.GenerateEventName(ref.Name, r.uniqueNano(now)), Namespace: ns},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: ReportingController,
		ReportingInstance:   r.cfg.NodeName,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Note:                truncate(note, maxNoteBytes),
		Type:                eventType,
	}
	select {
	case r.queue <- e:
	default:
		r.counts.WithLabelValues(reason, "queue_full").Inc()
	}
}

// uniqueNano is now in nanoseconds, or one more than the last name's when
// that is not later (a coarse or frozen clock), so names never collide.
func (r *Recorder) uniqueNano(now time.Time) int64 {
	n := now.UnixNano()
	for {
		last := r.lastNano.Load()
		if n <= last {
			n = last + 1
		}
		if r.lastNano.CompareAndSwap(last, n) {
			return n
		}
	}
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n-3]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}
