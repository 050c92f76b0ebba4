package migctl

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/gpud/gpud/internal/filewatch"
	"github.com/gpud/gpud/internal/wait"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/nodelabels"
)

// DefaultRecoverRetry is how often a failed recovery of an interrupted
// MIG apply is tried again (a busy-slice list that was not ready, say).
const DefaultRecoverRetry = 30 * time.Second

// Layout names the configured layout: the layout named Name in File, in
// mig-parted's format. A Layout with either empty applies none.
type Layout struct {
	File string
	Name string
}

// Config configures a [Controller].
type Config struct {
	// Service runs the recovery and the applies. Required.
	Service *mig.Service
	// Layout is the configured layout; its File is watched.
	Layout Layout
	// Force lets the configured layout destroy MIG slices that are
	// allocated or run processes.
	Force bool
	// ConfigPath is the agent config, watched with the layout file; empty
	// watches only the layout file.
	ConfigPath string
	// Reload rereads the configured layout when a watched file changes
	// (the agent's one config loader, so flags on the command line win
	// over the file); nil keeps Layout and only applies it again.
	Reload func() (Layout, error)
	// State, when set, is told the configured layout's state (pending,
	// success, failed) for the nvidia.com/mig.config.state node label.
	State func(string)
	// Metrics count the applies and mirror the state; nil records nothing.
	Metrics *Metrics
	// Log may be nil.
	Log *slog.Logger
	// RecoverRetry is the wait between recovery attempts; zero means
	// DefaultRecoverRetry.
	RecoverRetry time.Duration
}

// Controller keeps the configured MIG layout in place: it recovers an
// interrupted apply at start, applies the configured layout, and applies
// again when the agent config or the layout file changes. Run it once.
type Controller struct {
	cfg Config

	mu     sync.Mutex
	layout Layout
}

// New returns a controller; it checks cfg.
func New(cfg Config) (*Controller, error) {
	if cfg.Service == nil {
		return nil, errors.New("migctl: controller needs a Service")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Controller{cfg: cfg, layout: cfg.Layout}, nil
}

// Run recovers, applies the configured layout and watches its files until
// ctx ends; it returns nil then. Failures are logged and reported through
// State and Metrics, never returned: the agent runs on without its layout.
func (c *Controller) Run(ctx context.Context) error {
	// The configured layout waits for the recovery: until it succeeds
	// (here, on a retry, or by `gpud mig recover`), applies are refused
	// so that the journal's way back is not overwritten.
	retry := cmp.Or(c.cfg.RecoverRetry, DefaultRecoverRetry)
	for !c.recover(ctx, retry) {
		if !wait.Sleep(ctx, retry) {
			return nil
		}
	}
	c.applyConfigured(ctx)
	w := filewatch.Watcher{Paths: []string{c.cfg.ConfigPath, c.cfg.Layout.File}, Log: c.cfg.Log, OnChange: func() {
		c.reloadConfig()
		c.applyConfigured(ctx)
	}}
	if err := w.Run(ctx); err != nil {
		c.cfg.Log.Warn("mig config not watched, changes need a restart", "err", err)
		<-ctx.Done()
	}
	return nil
}

// setState reports the configured layout's state to State and Metrics.
func (c *Controller) setState(s string) {
	if c.cfg.State != nil {
		c.cfg.State(s)
	}
	c.cfg.Metrics.setState(s)
}

// recover finishes or undoes an apply a crash cut short; false when that
// failed (the node label then says failed, with the error logged).
func (c *Controller) recover(ctx context.Context, retry time.Duration) bool {
	ok, res, err := c.cfg.Service.Recover(ctx)
	switch {
	case err != nil:
		c.cfg.Log.Error("mig recovery failed, configured layout waits", "err", err, "retry_in", retry)
		c.setState(nodelabels.StateFailed)
		return false
	case ok:
		c.cfg.Log.Info("mig recovery done", "pending", len(res.Pending))
	}
	return true
}

// reloadConfig takes the configured layout from Reload; an invalid config
// is logged (file and line) and ignored.
func (c *Controller) reloadConfig() {
	if c.cfg.Reload == nil {
		return
	}
	l, err := c.cfg.Reload()
	if err != nil {
		c.cfg.Log.Error("agent config invalid, keeping the current one", "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.layout = l
}

func (c *Controller) applyConfigured(ctx context.Context) {
	c.mu.Lock()
	l := c.layout
	c.mu.Unlock()
	if l.File == "" || l.Name == "" {
		return
	}
	c.setState(nodelabels.StatePending)
	f, err := mig.LoadLayoutFile(l.File)
	if err != nil {
		c.cfg.Log.Error("mig layout file invalid", "path", l.File, "err", err)
		c.setState(stateOf(0, err))
		c.cfg.Metrics.observeApply(SourceConfig, 0, err)
		return
	}
	res, err := c.cfg.Service.Apply(ctx, f, l.Name, c.cfg.Force)
	stateErr := err
	if errors.Is(err, mig.ErrJournalKept) && !errors.Is(err, mig.ErrRolledBack) {
		stateErr = nil // the layout is in place
	}
	c.setState(stateOf(len(res.Pending), stateErr))
	c.cfg.Metrics.observeApply(SourceConfig, len(res.Pending), stateErr)
	switch {
	case errors.Is(err, mig.ErrJournalKept) && !errors.Is(err, mig.ErrRolledBack):
		c.cfg.Log.Error("mig layout in place, but its journal was not removed", "config", l.Name, "err", err)
		return
	case err != nil:
		c.cfg.Log.Error("mig layout not applied", "config", l.Name, "err", err)
		return
	}
	c.cfg.Log.Info("mig layout in place", "config", l.Name, "changed_gpus", len(res.Plan.GPUs)-len(res.Pending), "pending", len(res.Pending))
}

// stateOf is the configured layout's state after an apply, as mig-manager
// reports it: failed on err, pending while GPUs wait for a reset, else
// success.
func stateOf(pending int, err error) string {
	switch {
	case err != nil:
		return nodelabels.StateFailed
	case pending > 0:
		return nodelabels.StatePending
	}
	return nodelabels.StateSuccess
}
