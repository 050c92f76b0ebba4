package agentevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

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
	// Now is the clock of the rate limits; nil means time.Now.
	Now func() time.Time
}

// Recorder writes the agent's Events. Its methods are safe for concurrent
// use, never block on the API server, and do nothing on a nil *Recorder.
type Recorder struct {
	cfg         Config
	broadcaster events.EventBroadcaster
	rec         events.EventRecorder
	limit       *limiter
	counts      *prometheus.CounterVec

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
	r := &Recorder{cfg: cfg, limit: newLimiter(cfg.Limits)}
	// The broadcaster names its instance after the host (the pod's name
	// in a DaemonSet); the sink names the node instead.
	r.broadcaster = events.NewBroadcaster(nodeSink{&events.EventSinkImpl{Interface: cfg.Client.EventsV1()}, cfg.NodeName})
	r.rec = r.broadcaster.NewRecorder(scheme.Scheme, ReportingController)
	r.counts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpud_kube_events_total",
		Help: "Kubernetes Events the agent emitted (result recorded: handed to the API writer) or dropped by its per-object rate limit (result rate_limited), by reason.",
	}, []string{"reason", "result"})
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(r.counts); err != nil {
			return nil, fmt.Errorf("agentevents: register metrics: %w", err)
		}
	}
	return r, nil
}

// Run writes the Events until ctx ends, and reads the Node's UID so that
// node events show in `kubectl describe node` (retried until it is read).
// It returns nil when ctx ends.
func (r *Recorder) Run(ctx context.Context) error {
	if err := r.broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("agentevents: start recording: %w", err)
	}
	defer r.broadcaster.Shutdown()
	warned := false
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := r.cfg.Client.CoreV1().Nodes().Get(rctx, r.cfg.NodeName, metav1.GetOptions{})
		cancel()
		if err == nil {
			r.mu.Lock()
			r.nodeUID = n.UID
			r.mu.Unlock()
			break
		}
		if !warned {
			r.cfg.Log.Warn("node not read, node events go without its uid until it is", "node", r.cfg.NodeName, "err", err)
			warned = true
		}
		if !wait.Sleep(ctx, r.cfg.NodeRetry) {
			return nil
		}
	}
	<-ctx.Done()
	return nil
}

// Pod names a pod an event is about. UID may be empty when unknown, but
// `kubectl describe pod` shows only events that carry it.
type Pod struct {
	Namespace, Name, UID string
}

func (p Pod) ref(container string) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID)}
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

// emit writes one event unless its object's and reason's rate limit is
// spent.
func (r *Recorder) emit(ref *corev1.ObjectReference, eventType, reason, action, note string) {
	key := ref.Kind + "/" + ref.Namespace + "/" + ref.Name + "/" + ref.FieldPath + "/" + reason
	if !r.limit.allow(key, r.cfg.Now()) {
		r.counts.WithLabelValues(reason, "rate_limited").Inc()
		r.cfg.Log.Debug("event rate limited", "reason", reason, "kind", ref.Kind, "namespace", ref.Namespace, "name", ref.Name)
		return
	}
	r.counts.WithLabelValues(reason, "recorded").Inc()
	r.rec.Eventf(ref, nil, eventType, reason, action, "%s", truncate(note, maxNoteBytes))
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

// nodeSink sets each Event's reportingInstance to the node's name.
type nodeSink struct {
	events.EventSink
	node string
}

func (s nodeSink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	e.ReportingInstance = s.node
	return s.EventSink.Create(ctx, e)
}

func (s nodeSink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	e.ReportingInstance = s.node
	return s.EventSink.Update(ctx, e)
}
