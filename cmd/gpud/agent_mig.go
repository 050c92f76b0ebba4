package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gpud/gpud/internal/filewatch"
	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/nodelabels"
)

// migOptions are the MIG component's flags.
type migOptions struct {
	layoutFile string
	layoutName string
	force      bool
	resetGPUs  bool
	journal    string
}

func (o *migOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.layoutFile, "mig-config-file", "", "MIG layout file in mig-parted's format (version: v1, mig-configs: ...)")
	fs.StringVar(&o.layoutName, "mig-config", "", "name of the layout in --mig-config-file to apply at start and whenever the agent config or that file changes; empty applies none")
	fs.BoolVar(&o.force, "mig-force", false, "let the configured layout destroy MIG slices that are allocated or run processes")
	fs.BoolVar(&o.resetGPUs, "mig-reset-gpus", false, "reset an idle GPU whose MIG mode change needs it (simulated: ResetGPU; real: nvidia-smi -r), instead of leaving it pending")
	fs.StringVar(&o.journal, "mig-journal", defaultMIGJournal, "file recording an apply in progress, so a restarted agent finishes or undoes it")
}

// validate checks the flags and, when a layout is configured, that the
// file parses (through the layout parser and its bounds) and has it.
func (o *migOptions) validate() []error {
	if o.layoutName == "" {
		return nil
	}
	if o.layoutFile == "" {
		return []error{flagErr("mig-config", "%s needs --mig-config-file", quoteTrunc(o.layoutName))}
	}
	f, err := mig.LoadLayoutFile(o.layoutFile)
	if err != nil {
		return []error{flagErr("mig-config-file", "%w", err)}
	}
	if !slices.Contains(f.Names(), o.layoutName) {
		return []error{flagErr("mig-config", "%s is not a layout of %s (it has %v)", quoteTrunc(o.layoutName), o.layoutFile, f.Names())}
	}
	return nil
}

// migComponent keeps the configured MIG layout in place: it recovers an
// interrupted apply at start, applies --mig-config, and applies again when
// the agent config or the layout file changes.
type migComponent struct {
	svc *mig.Service
	// reload rereads the agent config with the agent's one loader (flags
	// on the command line win over the file); nil without --config.
	reload     func() (migOptions, error)
	configPath string // the agent config, watched with the layout file
	log        *slog.Logger
	// state, when set, is told the configured layout's state (pending,
	// success, failed) for the nvidia.com/mig.config.state node label.
	state func(string)
	// metrics count the applies and mirror the state; nil records nothing.
	metrics *migMetrics

	// recoverRetry overrides migRecoverRetry (tests).
	recoverRetry time.Duration

	mu   sync.Mutex
	opts migOptions
}

func (c *migComponent) Run(ctx context.Context) error {
	// The configured layout waits for the recovery: until it succeeds
	// (here, on a retry, or by `gpud mig recover`), applies are refused
	// so that the journal's way back is not overwritten.
	retry := cmp.Or(c.recoverRetry, migRecoverRetry)
	for !c.recover(ctx, retry) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
	c.applyConfigured(ctx)
	w := filewatch.Watcher{Paths: []string{c.configPath, c.opts.layoutFile}, Log: c.log, OnChange: func() {
		c.reloadConfig()
		c.applyConfigured(ctx)
	}}
	if err := w.Run(ctx); err != nil {
		c.log.Warn("mig config not watched, changes need a restart", "err", err)
		<-ctx.Done()
	}
	return nil
}

// migRecoverRetry is how often a failed recovery of an interrupted MIG
// apply is tried again (a busy-slice list that was not ready, say).
const migRecoverRetry = 30 * time.Second

// recover finishes or undoes an apply a crash cut short; false when that
// failed (the node label then says failed, with the error logged).
func (c *migComponent) recover(ctx context.Context, retry time.Duration) bool {
	ok, res, err := c.svc.Recover(ctx)
	switch {
	case err != nil:
		c.log.Error("mig recovery failed, configured layout waits", "err", err, "retry_in", retry)
		if c.state != nil {
			c.state(nodelabels.StateFailed)
		}
		c.metrics.setState(nodelabels.StateFailed)
		return false
	case ok:
		c.log.Info("mig recovery done", "pending", len(res.Pending))
	}
	return true
}

// reloadConfig takes --mig-config and --mig-config-file from the reread
// agent config; an invalid config is logged (file and line) and ignored.
func (c *migComponent) reloadConfig() {
	if c.reload == nil {
		return
	}
	o, err := c.reload()
	if err != nil {
		c.log.Error("agent config invalid, keeping the current one", "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opts.layoutName, c.opts.layoutFile = o.layoutName, o.layoutFile
}

func (c *migComponent) applyConfigured(ctx context.Context) {
	c.mu.Lock()
	o := c.opts
	c.mu.Unlock()
	if o.layoutFile == "" || o.layoutName == "" {
		return
	}
	state := func(s string) {
		if c.state != nil {
			c.state(s)
		}
		c.metrics.setState(s)
	}
	state(nodelabels.StatePending)
	f, err := mig.LoadLayoutFile(o.layoutFile)
	if err != nil {
		c.log.Error("mig layout file invalid", "path", o.layoutFile, "err", err)
		reportMIGState(state, 0, err)
		c.metrics.observeApply(migSourceConfig, 0, err)
		return
	}
	res, err := c.svc.Apply(ctx, f, o.layoutName, o.force)
	stateErr := err
	if errors.Is(err, mig.ErrJournalKept) && !errors.Is(err, mig.ErrRolledBack) {
		stateErr = nil // the layout is in place
	}
	reportMIGState(state, len(res.Pending), stateErr)
	c.metrics.observeApply(migSourceConfig, len(res.Pending), stateErr)
	switch {
	case errors.Is(err, mig.ErrJournalKept) && !errors.Is(err, mig.ErrRolledBack):
		c.log.Error("mig layout in place, but its journal was not removed", "config", o.layoutName, "err", err)
		return
	case err != nil:
		c.log.Error("mig layout not applied", "config", o.layoutName, "err", err)
		return
	}
	c.log.Info("mig layout in place", "config", o.layoutName, "changed_gpus", len(res.Plan.GPUs)-len(res.Pending), "pending", len(res.Pending))
}

// migRequest is the body of POST /v1/mig/plan and /v1/mig/apply.
type migRequest struct {
	// Layouts is the layout file's content; Config names the layout.
	Layouts string `json:"layouts"`
	Config  string `json:"config"`
	Force   bool   `json:"force"`
}

// migAPI serves the MIG routes of the admin API; metrics (may be nil)
// count its applies.
type migAPI struct {
	svc     *mig.Service
	metrics *migMetrics
}

func (a migAPI) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/mig/state", func(w http.ResponseWriter, _ *http.Request) {
		st, err := a.svc.State()
		if err != nil {
			adminapi.WriteError(w, http.StatusInternalServerError, "nvml", err)
			return
		}
		adminapi.WriteJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("POST /v1/mig/plan", a.handle(false))
	mux.HandleFunc("POST /v1/mig/apply", a.handle(true))
}

func (a migAPI) handle(apply bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req migRequest
		if err := adminapi.ReadJSON(r, &req); err != nil {
			adminapi.WriteError(w, http.StatusBadRequest, "bad_request", err)
			return
		}
		f, err := mig.ParseLayoutFile([]byte(req.Layouts))
		if err != nil {
			adminapi.WriteError(w, http.StatusBadRequest, "bad_layout", err)
			return
		}
		run := a.svc.Plan
		if apply {
			run = a.svc.Apply
		}
		res, err := run(r.Context(), f, req.Config, req.Force)
		if apply {
			a.metrics.observeApply(migSourceAPI, len(res.Pending), err)
		}
		if err != nil {
			status, code := migErrorStatus(err)
			adminapi.WriteError(w, status, code, err)
			return
		}
		adminapi.WriteJSON(w, http.StatusOK, res)
	}
}

func migErrorStatus(err error) (int, string) {
	switch {
	case errors.Is(err, mig.ErrBusy):
		return http.StatusConflict, "busy"
	case errors.Is(err, mig.ErrBusyUnknown):
		return http.StatusServiceUnavailable, "busy_unknown"
	case errors.Is(err, mig.ErrNoFit):
		return http.StatusConflict, "no_fit"
	case errors.Is(err, mig.ErrBadLayout), errors.Is(err, mig.ErrUnknownProfile):
		return http.StatusBadRequest, "bad_layout"
	case errors.Is(err, mig.ErrRolledBack):
		return http.StatusInternalServerError, "rolled_back"
	case errors.Is(err, mig.ErrJournalKept):
		return http.StatusInternalServerError, "journal_kept"
	case errors.Is(err, mig.ErrInterrupted):
		return http.StatusConflict, "interrupted"
	}
	return http.StatusInternalServerError, "failed"
}
