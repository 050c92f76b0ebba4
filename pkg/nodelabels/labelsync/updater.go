// Package labelsync keeps a node's GPU labels (pkg/nodelabels) on its
// Node object: server-side apply under one field manager, debounced on
// inventory changes, resynced periodically, backing off on API errors.
package labelsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/nodelabels"
)

// FieldManager is the server-side apply field manager that owns the
// labels the updater applies (and its annotation).
const FieldManager = "gpud-node-labels"

// ManagedAnnotation lists, comma-separated and sorted, the label keys the
// updater applies now. Ownership itself is the API server's record (the
// Node's managedFields for FieldManager): the annotation lets people and
// tools see it without reading managedFields.
const ManagedAnnotation = "gpud.io/managed-labels"

// Defaults of [Updater]'s timing.
const (
	DefaultDebounce   = 2 * time.Second
	DefaultResync     = 10 * time.Minute
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = 2 * time.Minute
)

// InventorySource is the node's inventory with change notification (the
// discovery store).
type InventorySource interface {
	Inventory() (gpu.Inventory, bool)
	InventoryChanged() <-chan struct{}
}

// Config is an [Updater]'s dependencies.
type Config struct {
	Client    kubernetes.Interface
	NodeName  string
	Inventory InventorySource
	// Options returns the current options at each update; nil means zero
	// Options (whole GPUs, no MIG strategy).
	Options func() nodelabels.Options
	// Debounce is how long a change waits for more before the labels are
	// recomputed; Resync is how often they are applied again even without
	// a change (repairing a label someone removed); MinBackoff and
	// MaxBackoff bound the retries after a failed update. Zero means the
	// defaults.
	Debounce, Resync, MinBackoff, MaxBackoff time.Duration
	Log                                      *slog.Logger
}

// Updater keeps the computed labels on one Node. It owns exactly what it
// applied through server-side apply with [FieldManager]: a label it
// applied and no longer computes is removed by the API server; a label
// another manager set is never changed or removed unless the updater
// computes the same key (then it takes it over, forcing the conflict,
// since it is the authority for these keys on this node); a key both set
// to the same value stays when the updater drops it. A restarted updater
// applies under the same field manager, so it owns what the last one
// applied.
type Updater struct {
	cfg     Config
	refresh chan struct{}

	// last is what the last successful apply sent, so an unchanged label
	// set is not applied again before the resync.
	last     map[string]string
	lastUID  types.UID
	warnings []string
}

// New returns an updater; it checks cfg.
func New(cfg Config) (*Updater, error) {
	if cfg.Client == nil || cfg.Inventory == nil || cfg.NodeName == "" {
		return nil, errors.New("nodelabels: updater needs Client, NodeName and Inventory")
	}
	if cfg.Options == nil {
		cfg.Options = func() nodelabels.Options { return nodelabels.Options{} }
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Debounce, DefaultDebounce)
	def(&cfg.Resync, DefaultResync)
	def(&cfg.MinBackoff, DefaultMinBackoff)
	def(&cfg.MaxBackoff, DefaultMaxBackoff)
	return &Updater{cfg: cfg, refresh: make(chan struct{}, 1)}, nil
}

// Refresh asks for an update after the debounce: the options changed (a
// MIG layout was applied, say). It never blocks.
func (u *Updater) Refresh() {
	select {
	case u.refresh <- struct{}{}:
	default:
	}
}

// Sync computes the labels from the current inventory and applies them
// now. Before the first inventory read it does nothing (an empty
// inventory would remove every label). It returns the labels applied.
func (u *Updater) Sync(ctx context.Context) (map[string]string, error) {
	inv, ok := u.cfg.Inventory.Inventory()
	if !ok {
		return nil, nil
	}
	r := nodelabels.Compute(inv, u.cfg.Options())
	if !slices.Equal(r.Warnings, u.warnings) {
		for _, w := range r.Warnings {
			u.cfg.Log.Warn("node label not as GFD would set it", "node", u.cfg.NodeName, "reason", w)
		}
		u.warnings = r.Warnings
	}
	return r.Labels, u.apply(ctx, r.Labels, false)
}

// apply server-side applies labels and the annotation on the Node, which
// must exist: it is read first, and the apply carries its UID, so the
// updater never creates a Node nor writes a recreated one it did not read.
// Unless force, an apply identical to the last successful one is skipped.
func (u *Updater) apply(ctx context.Context, labels map[string]string, force bool) error {
	node, err := u.cfg.Client.CoreV1().Nodes().Get(ctx, u.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("nodelabels: node %s: %w (is --node-name the Node's name?)", u.cfg.NodeName, err)
		}
		return fmt.Errorf("nodelabels: read node %s: %w", u.cfg.NodeName, err)
	}
	if !force && node.UID == u.lastUID && maps.Equal(labels, u.last) && inPlace(node.Labels, labels) {
		return nil
	}
	keys := slices.Sorted(maps.Keys(labels))
	ac := corev1ac.Node(u.cfg.NodeName).WithUID(node.UID).WithLabels(labels).
		WithAnnotations(map[string]string{ManagedAnnotation: strings.Join(keys, ",")})
	if _, err := u.cfg.Client.CoreV1().Nodes().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("nodelabels: apply labels on node %s: %w", u.cfg.NodeName, err)
	}
	if !maps.Equal(labels, u.last) || node.UID != u.lastUID {
		u.cfg.Log.Info("node labels applied", "node", u.cfg.NodeName, "labels", len(labels))
	}
	u.last, u.lastUID = maps.Clone(labels), node.UID
	return nil
}

// inPlace reports whether node has every label of want with its value.
func inPlace(node, want map[string]string) bool {
	for k, v := range want {
		if got, ok := node[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Run keeps the labels up to date until ctx ends: at start, after each
// inventory change or Refresh (debounced), and every Resync. A failed
// update is logged once per outage and retried with backoff; it never
// ends Run, which returns nil when ctx ends.
func (u *Updater) Run(ctx context.Context) error {
	changed := u.cfg.Inventory.InventoryChanged()
	resync := time.NewTicker(u.cfg.Resync)
	defer resync.Stop()
	// wait is the next update: now, a debounce after the first change
	// since the last update (later changes within it join it, and never
	// push it back), or a backoff after a failure; armed while it runs.
	wait := time.NewTimer(0)
	defer wait.Stop()
	armed := true
	backoff := time.Duration(0)
	failing, force := false, false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			changed = u.cfg.Inventory.InventoryChanged()
			if !armed {
				wait.Reset(u.cfg.Debounce)
				armed = true
			}
			continue
		case <-u.refresh:
			if !armed {
				wait.Reset(u.cfg.Debounce)
				armed = true
			}
			continue
		case <-resync.C:
			force = true
		case <-wait.C:
			armed = false
		}
		if _, err := u.syncOnce(ctx, force); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			backoff = min(max(2*backoff, u.cfg.MinBackoff), u.cfg.MaxBackoff)
			if !failing {
				u.cfg.Log.Warn("node labels not updated, retrying", "node", u.cfg.NodeName, "err", err, "retry_in", backoff)
				failing = true
			} else {
				u.cfg.Log.Debug("node labels still not updated", "node", u.cfg.NodeName, "err", err, "retry_in", backoff)
			}
			if !armed {
				wait.Reset(backoff)
				armed = true
			}
			continue
		}
		if failing {
			u.cfg.Log.Info("node labels updated again", "node", u.cfg.NodeName)
		}
		failing, backoff, force = false, 0, false
	}
}

func (u *Updater) syncOnce(ctx context.Context, force bool) (map[string]string, error) {
	if force {
		u.last = nil
	}
	return u.Sync(ctx)
}
