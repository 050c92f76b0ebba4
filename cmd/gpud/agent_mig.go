package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/goccy/go-yaml"

	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/timeslice"
)

// adminComponent serves the local admin API on a root-only unix socket.
type adminComponent struct{ socket string }

func (c *adminComponent) name() string { return "admin" }

func (c *adminComponent) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.socket, "admin-socket", adminapi.DefaultSocket, "unix socket of the local admin API (gpud mig apply, gpud sharing); mode 0600, root only; empty disables it")
}

func (c *adminComponent) run(ctx context.Context, a *agent) error {
	if c.socket == "" {
		<-ctx.Done()
		return nil
	}
	return (&adminapi.Server{Path: c.socket, Handler: a.adminMux, Log: a.log.With("component", "admin")}).Run(ctx)
}

// migRequest is the body of POST /v1/mig/plan and /v1/mig/apply.
type migRequest struct {
	// Layouts is the layout file's content; Config names the layout.
	Layouts string `json:"layouts"`
	Config  string `json:"config"`
	Force   bool   `json:"force"`
}

// migComponent applies MIG layouts: the one its config names (again when
// the agent config or the layout file changes) and those sent to the admin
// API. Applies are serialized.
type migComponent struct {
	layoutFile string
	layoutName string
	force      bool
	resetGPUs  bool
	journal    string
	fs         *flag.FlagSet

	mu sync.Mutex // one apply at a time
}

func (c *migComponent) name() string { return "mig" }

func (c *migComponent) registerFlags(fs *flag.FlagSet) {
	c.fs = fs
	fs.StringVar(&c.layoutFile, "mig-config-file", "", "MIG layout file in mig-parted's format (version: v1, mig-configs: ...)")
	fs.StringVar(&c.layoutName, "mig-config", "", "name of the layout in --mig-config-file to apply at start and whenever the agent config or that file changes; empty applies none")
	fs.BoolVar(&c.force, "mig-force", false, "let the configured layout destroy MIG slices that are allocated or run processes")
	fs.BoolVar(&c.resetGPUs, "mig-reset-gpus", false, "reset an idle GPU whose MIG mode change needs it (simulated: ResetGPU; real: nvidia-smi -r), instead of leaving it pending")
	fs.StringVar(&c.journal, "mig-journal", "/var/lib/gpud/mig-journal.json", "file recording an apply in progress, so a restarted agent finishes or undoes it")
}

func (c *migComponent) applier(a *agent) *mig.Applier {
	return newMIGApplier(a.lib, a.sim, c.journal, c.resetGPUs, a.log.With("component", "mig"))
}

func (c *migComponent) run(ctx context.Context, a *agent) error {
	log := a.log.With("component", "mig")
	c.routes(a)
	if ok, res, err := c.recover(ctx, a); ok {
		if err != nil {
			log.Error("mig recovery failed", "err", err)
		} else {
			log.Info("mig recovery done", "pending", len(res.Pending))
		}
	}
	c.applyConfigured(ctx, a, log)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("mig: watch config: %w", err)
	}
	defer w.Close()
	watched := map[string]bool{}
	for _, p := range []string{c.agentConfigPath(), c.layoutFile} {
		if p == "" {
			continue
		}
		abs, _ := filepath.Abs(p)
		watched[abs] = true
		if err := w.Add(filepath.Dir(abs)); err != nil {
			log.Warn("cannot watch config dir, changes need a restart", "path", p, "err", err)
		}
	}
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-w.Events:
			// Editors and ConfigMaps replace files; any event on a watched
			// name (or a ..data swap) is a change.
			if watched[ev.Name] || filepath.Base(ev.Name) == "..data" {
				debounce = time.After(300 * time.Millisecond)
			}
		case err := <-w.Errors:
			log.Warn("config watch error", "err", err)
		case <-debounce:
			debounce = nil
			c.reloadAgentConfig(log)
			c.applyConfigured(ctx, a, log)
		}
	}
}

func (c *migComponent) agentConfigPath() string {
	if f := c.fs.Lookup("config"); f != nil {
		return f.Value.String()
	}
	return ""
}

// reloadAgentConfig rereads mig-config and mig-config-file from the agent
// config file; the file wins over the values at start.
func (c *migComponent) reloadAgentConfig(log *slog.Logger) {
	p := c.agentConfigPath()
	if p == "" {
		return
	}
	data, err := os.ReadFile(p)
	if err != nil {
		log.Warn("agent config unreadable", "path", p, "err", err)
		return
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		log.Warn("agent config invalid", "path", p, "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := m["mig-config"]; ok {
		c.layoutName = fmt.Sprint(v)
	}
	if v, ok := m["mig-config-file"]; ok {
		c.layoutFile = fmt.Sprint(v)
	}
}

func (c *migComponent) applyConfigured(ctx context.Context, a *agent, log *slog.Logger) {
	c.mu.Lock()
	file, name, force := c.layoutFile, c.layoutName, c.force
	c.mu.Unlock()
	if file == "" || name == "" {
		return
	}
	f, err := mig.LoadLayoutFile(file)
	if err != nil {
		log.Error("mig layout file invalid", "path", file, "err", err)
		return
	}
	res, err := c.apply(ctx, a, f, name, force, false)
	if err != nil {
		log.Error("mig layout not applied", "config", name, "err", err)
		return
	}
	log.Info("mig layout in place", "config", name, "changed_gpus", len(res.Plan.GPUs)-len(res.Pending), "pending", len(res.Pending))
}

// apply plans (and unless dryRun applies) a layout, then rediscovers so
// the device plugin re-advertises.
func (c *migComponent) apply(ctx context.Context, a *agent, f mig.LayoutFile, name string, force, dryRun bool) (mig.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := mig.ReadState(a.lib)
	if err != nil {
		return mig.Result{}, err
	}
	want, err := f.Resolve(name, st)
	if err != nil {
		return mig.Result{}, err
	}
	plan, err := mig.NewPlan(st, want, busyNow(ctx, a), mig.Options{Force: force})
	if err != nil || dryRun {
		return mig.Result{Plan: plan, State: st}, err
	}
	res, err := c.applier(a).Apply(ctx, st, want, plan)
	c.afterApply(a, res)
	return res, err
}

func (c *migComponent) recover(ctx context.Context, a *agent) (bool, mig.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok, res, err := c.applier(a).Recover(ctx, busyNow(ctx, a))
	if ok {
		c.afterApply(a, res)
	}
	return ok, res, err
}

// afterApply rediscovers and keeps GPUs with a pending mode change out of
// the advertised devices until the reset is done.
func (c *migComponent) afterApply(a *agent, res mig.Result) {
	inv, err := a.Rediscover()
	if err != nil {
		a.log.Warn("rediscover after mig apply failed", "component", "mig", "err", err)
		return
	}
	// The device plugin withdraws GPUs whose MIG mode change is pending;
	// they are advertised again once a reset applied it.
	for _, g := range inv.GPUs {
		if g.MIGPending {
			a.log.Info("gpu withdrawn until reset", "component", "mig", "gpu_uuid", g.UUID)
		}
	}
}

// busyNow is who holds which device: processes from NVML and, when the
// kubelet answers, pod allocations.
func busyNow(ctx context.Context, a *agent) mig.Busy {
	ps, err := mig.ReadProcesses(a.lib)
	if err != nil {
		a.log.Warn("reading gpu processes failed; busy slices may be missed", "component", "mig", "err", err)
	}
	busy := mig.BusyFromProcesses(ps)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	as, err := a.PodResources().List(ctx)
	if err != nil {
		a.log.Debug("pod resources unavailable for mig busy check", "err", err)
		return busy
	}
	return busy.Merge(busyFromAssignments(as))
}

func busyFromAssignments(as []podresources.Assignment) mig.Busy {
	b := mig.Busy{}
	for _, x := range as {
		for _, id := range x.DeviceIDs {
			uuid, _, _ := timeslice.ParseReplicaID(id)
			b[uuid] = append(b[uuid], x.Namespace+"/"+x.Pod)
		}
	}
	return b
}

func (c *migComponent) routes(a *agent) {
	a.adminMux.HandleFunc("GET /v1/mig/state", func(w http.ResponseWriter, _ *http.Request) {
		st, err := mig.ReadState(a.lib)
		if err != nil {
			adminapi.WriteError(w, http.StatusInternalServerError, "nvml", err)
			return
		}
		adminapi.WriteJSON(w, http.StatusOK, st)
	})
	handle := func(dryRun bool) http.HandlerFunc {
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
			res, err := c.apply(r.Context(), a, f, req.Config, req.Force, dryRun)
			if err != nil {
				status, code := migErrorStatus(err)
				adminapi.WriteError(w, status, code, err)
				return
			}
			adminapi.WriteJSON(w, http.StatusOK, res)
		}
	}
	a.adminMux.HandleFunc("POST /v1/mig/plan", handle(true))
	a.adminMux.HandleFunc("POST /v1/mig/apply", handle(false))
}

func migErrorStatus(err error) (int, string) {
	switch {
	case errors.Is(err, mig.ErrBusy):
		return http.StatusConflict, "busy"
	case errors.Is(err, mig.ErrNoFit):
		return http.StatusConflict, "no_fit"
	case errors.Is(err, mig.ErrBadLayout), errors.Is(err, mig.ErrUnknownProfile):
		return http.StatusBadRequest, "bad_layout"
	case errors.Is(err, mig.ErrRolledBack):
		return http.StatusInternalServerError, "rolled_back"
	}
	return http.StatusInternalServerError, "failed"
}
