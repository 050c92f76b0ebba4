package nodetaint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/pkg/gpu"
)

// Defaults of [SyncerConfig]'s timing.
const (
	DefaultResync     = time.Minute
	DefaultMaxBackoff = 2 * time.Minute
)

// maxReasonBytes bounds the reason annotation.
const maxReasonBytes = 1024

// InventorySource is the node's inventory with change notification (the
// discovery store).
type InventorySource interface {
	Inventory() (gpu.Inventory, bool)
	InventoryChanged() <-chan struct{}
}

// SyncerConfig is a [Syncer]'s dependencies.
type SyncerConfig struct {
	Client    kubernetes.Interface
	NodeName  string
	Inventory InventorySource
	// Tracker tunes the decision.
	Tracker Config
	// Resync is how often health is observed and the Node checked without
	// an inventory change (default [DefaultResync]); the Syncer also wakes
	// when the taint may clear.
	Resync time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	Log *slog.Logger
	// OnChange, if set, is told each taint the Syncer wrote: the new one,
	// or the zero Taint when it removed it (the agent records an Event).
	OnChange func(Taint)
	// Metrics, if set, gets gpud_node_taint: 1 for each effect of
	// TaintKey the Syncer last wrote or found on the Node (NoSchedule,
	// NoExecute), 0 otherwise.
	Metrics prometheus.Registerer
}

// Syncer keeps [TaintKey] on the agent's Node as its [Tracker] decides.
type Syncer struct {
	cfg     SyncerConfig
	tr      *Tracker
	resumed bool
	tainted *prometheus.GaugeVec
}

// NewSyncer checks cfg and returns a Syncer.
func NewSyncer(cfg SyncerConfig) (*Syncer, error) {
	if cfg.Client == nil || cfg.Inventory == nil || cfg.NodeName == "" {
		return nil, errors.New("nodetaint: syncer needs Client, NodeName and Inventory")
	}
	tr, err := NewTracker(cfg.Tracker)
	if err != nil {
		return nil, err
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Syncer{cfg: cfg, tr: tr, tainted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpud_node_taint",
		Help: "1 while the agent's Node carries " + TaintKey + " with this effect (its GPUs keep failing), else 0."}, []string{"effect"})}
	for _, e := range []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute} {
		s.tainted.WithLabelValues(string(e)).Set(0)
	}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(s.tainted); err != nil {
			return nil, fmt.Errorf("nodetaint: register metrics: %w", err)
		}
	}
	return s, nil
}

// report sets gpud_node_taint to t.
func (s *Syncer) report(t Taint) {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	s.tainted.WithLabelValues(string(corev1.TaintEffectNoSchedule)).Set(b(t.Value != ""))
	s.tainted.WithLabelValues(string(corev1.TaintEffectNoExecute)).Set(b(t.Value != "" && t.NoExecute))
}

// Sync observes the GPUs' health now and puts the Node's taint in line
// with the decision. Before the first inventory read it does nothing. It
// returns the taint wanted.
func (s *Syncer) Sync(ctx context.Context) (Taint, error) {
	inv, ok := s.cfg.Inventory.Inventory()
	if !ok {
		return Taint{}, nil
	}
	node, err := s.cfg.Client.CoreV1().Nodes().Get(ctx, s.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return Taint{}, fmt.Errorf("nodetaint: read node %s: %w", s.cfg.NodeName, err)
	}
	now := s.cfg.Now()
	if !s.resumed {
		s.resumed = true
		if t := current(node); t.Value != "" {
			s.tr.Resume(t, now)
		}
	}
	gpus := make([]GPU, 0, len(inv.GPUs))
	for _, g := range inv.GPUs {
		gpus = append(gpus, GPU{UUID: g.UUID, Unhealthy: g.Health != "" && g.Health != gpu.Healthy, Reason: g.HealthReason})
	}
	want := s.tr.Observe(gpus, now)
	if have := current(node); have == want {
		s.report(have)
		return want, nil
	}
	if err := s.write(ctx, node, want); err != nil {
		return want, err
	}
	s.report(want)
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(want)
	}
	switch {
	case want.NoExecute:
		s.cfg.Log.Warn("node tainted NoExecute: its GPUs still fail", "node", s.cfg.NodeName, "taint", TaintKey+"="+want.Value+":NoExecute", "reason", want.Reason)
	case want.Value != "":
		s.cfg.Log.Warn("node tainted: its GPUs keep failing", "node", s.cfg.NodeName, "taint", TaintKey+"="+want.Value+":NoSchedule", "reason", want.Reason)
	default:
		s.cfg.Log.Info("node taint removed: its GPUs stayed healthy", "node", s.cfg.NodeName, "taint", TaintKey)
	}
	return want, nil
}

// current is the taint the node carries (NoExecute: with its NoExecute
// step).
func current(node *corev1.Node) Taint {
	var out Taint
	for _, t := range node.Spec.Taints {
		if t.Key != TaintKey {
			continue
		}
		if out.Value == "" {
			out = Taint{Value: t.Value, Reason: node.Annotations[ReasonAnnotation]}
		}
		out.NoExecute = out.NoExecute || t.Effect == corev1.TaintEffectNoExecute
	}
	return out
}

// write patches the node's taints (every other taint kept, in order) and
// the reason annotation, guarded by the resourceVersion read.
func (s *Syncer) write(ctx context.Context, node *corev1.Node, want Taint) error {
	taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key == TaintKey })
	if want.Value != "" {
		now := metav1.NewTime(s.cfg.Now())
		taints = append(taints, corev1.Taint{Key: TaintKey, Value: want.Value, Effect: corev1.TaintEffectNoSchedule, TimeAdded: kept(node, corev1.TaintEffectNoSchedule, &now)})
		if want.NoExecute {
			taints = append(taints, corev1.Taint{Key: TaintKey, Value: want.Value, Effect: corev1.TaintEffectNoExecute, TimeAdded: kept(node, corev1.TaintEffectNoExecute, &now)})
		}
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
	}
	ops := []op{{Op: "test", Path: "/metadata/resourceVersion", Value: node.ResourceVersion}}
	if len(taints) == 0 {
		if len(node.Spec.Taints) > 0 {
			ops = append(ops, op{Op: "remove", Path: "/spec/taints"})
		}
	} else {
		ops = append(ops, op{Op: "add", Path: "/spec/taints", Value: taints})
	}
	annPath := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(ReasonAnnotation, "~", "~0"), "/", "~1")
	_, has := node.Annotations[ReasonAnnotation]
	switch {
	case want.Value != "" && node.Annotations == nil:
		ops = append(ops, op{Op: "add", Path: "/metadata/annotations", Value: map[string]string{ReasonAnnotation: truncate(want.Reason)}})
	case want.Value != "":
		ops = append(ops, op{Op: "add", Path: annPath, Value: truncate(want.Reason)})
	case has:
		ops = append(ops, op{Op: "remove", Path: annPath})
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return fmt.Errorf("nodetaint: patch: %w", err)
	}
	if _, err := s.cfg.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.JSONPatchType, data, metav1.PatchOptions{FieldManager: "gpud-node-taint"}); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
			return fmt.Errorf("nodetaint: node %s changed while it was written (retried): %w", node.Name, err)
		}
		return fmt.Errorf("nodetaint: taint node %s: %w", node.Name, err)
	}
	return nil
}

// kept is when node's taint TaintKey of effect e was added, or now when it
// has none (a rewrite keeps the time a taint was first added).
func kept(node *corev1.Node, e corev1.TaintEffect, now *metav1.Time) *metav1.Time {
	for _, t := range node.Spec.Taints {
		if t.Key == TaintKey && t.Effect == e && t.TimeAdded != nil {
			return t.TimeAdded
		}
	}
	return now
}

func truncate(s string) string {
	if len(s) <= maxReasonBytes {
		return s
	}
	cut := maxReasonBytes - 3
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "..."
}

// Run syncs until ctx ends: at start, on each inventory change, every
// Resync and when the taint may clear. A failed sync is logged once per
// outage and retried with backoff; Run returns nil when ctx ends.
func (s *Syncer) Run(ctx context.Context) error {
	changed := s.cfg.Inventory.InventoryChanged()
	backoff := time.Duration(0)
	failing := false
	for {
		wait := s.cfg.Resync
		if _, err := s.Sync(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			backoff = min(max(2*backoff, time.Second), DefaultMaxBackoff)
			if !failing {
				s.cfg.Log.Warn("node taint not updated, retrying", "node", s.cfg.NodeName, "err", err, "retry_in", backoff)
				failing = true
			}
			wait = backoff
		} else {
			failing, backoff = false, 0
			if at := s.tr.Next(); !at.IsZero() {
				wait = min(wait, max(at.Sub(s.cfg.Now()), 0)+time.Millisecond)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-changed:
			changed = s.cfg.Inventory.InventoryChanged()
		case <-t.C:
		}
		t.Stop()
	}
}
