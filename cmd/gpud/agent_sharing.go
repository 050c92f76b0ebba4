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
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/procattr"
	"github.com/gpud/gpud/pkg/timeslice"
)

// sharingComponent keeps the sharing config current and runs the memory
// watchdog.
type sharingComponent struct {
	enforce  string
	interval time.Duration
}

func (c *sharingComponent) name() string { return "sharing" }

func (c *sharingComponent) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.enforce, "enforce-memory", "report", "memory watchdog for shares with a memory limit: off, report (event + metric) or kill (also kill the offending processes)")
	fs.DurationVar(&c.interval, "memory-watchdog-interval", 10*time.Second, "how often the memory watchdog compares per-process GPU memory with the shares' limits")
}

func (c *sharingComponent) run(ctx context.Context, a *agent) error {
	log := a.log.With("component", "sharing")
	mode, err := timeslice.ParseEnforce(c.enforce)
	if err != nil {
		return err
	}
	// The agent loaded --sharing-config into a.sharing before starting.
	file := a.flag("sharing-config")
	c.routes(a)
	wd, err := timeslice.NewWatchdog(timeslice.WatchdogConfig{
		Mode: mode, Interval: c.interval,
		Sharing:     a.sharing.Get,
		Inventory:   func() gpu.Inventory { inv, _ := a.Inventory(); return inv },
		Processes:   nvmlProcesses{a},
		Containers:  cgroupLookup{procattr.Resolver{ProcRoot: a.procRoot}},
		Pods:        podNames{procattr.PodLogs{Root: a.podLogsRoot}},
		Assignments: assignments{a},
		Kill:        func(pid uint32) error { return syscall.Kill(int(pid), syscall.SIGKILL) },
		Log:         log,
	})
	if err != nil {
		return err
	}
	if err := registerAll(a.metrics,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gpud_sharing_memory_over_limit_total", Help: "Times a pod went over its shares' GPU memory limit on a device."},
			func() float64 { v, _ := wd.Counts(); return float64(v) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gpud_sharing_memory_kills_total", Help: "Processes the memory watchdog killed (--enforce-memory kill)."},
			func() float64 { _, k := wd.Counts(); return float64(k) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpud_sharing_memory_over_limit", Help: "Pods over their GPU memory limit at the last check."},
			func() float64 { return float64(len(wd.Active())) }),
	); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	go c.watchFile(ctx, a, file, log)
	log.Info("sharing runtime started", "enforce_memory", string(mode), "sharing_config", file)
	return wd.Run(ctx)
}

// watchFile applies --sharing-config again when it changes; a change that
// would take away an allocated replica is refused and logged.
func (c *sharingComponent) watchFile(ctx context.Context, a *agent, file string, log *slog.Logger) {
	if file == "" {
		return
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("cannot watch sharing config", "err", err)
		return
	}
	defer w.Close()
	abs, _ := filepath.Abs(file)
	if err := w.Add(filepath.Dir(abs)); err != nil {
		log.Warn("cannot watch sharing config", "path", file, "err", err)
		return
	}
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-w.Events:
			if ev.Name == abs || filepath.Base(ev.Name) == "..data" {
				debounce = time.After(300 * time.Millisecond)
			}
		case <-w.Errors:
		case <-debounce:
			debounce = nil
			cfg, err := loadSharing(file)
			if err != nil {
				log.Error("sharing config invalid, keeping the current one", "err", err)
				continue
			}
			if changed, err := updateSharing(ctx, a, cfg); err != nil {
				log.Error("sharing change refused", "err", err)
			} else if changed {
				log.Info("sharing config changed", "path", file)
			}
		}
	}
}

// updateSharing applies cfg unless it takes away an allocated replica.
func updateSharing(ctx context.Context, a *agent, cfg timeslice.Config) (bool, error) {
	inv, _ := a.Inventory()
	allocated := map[string]string{}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	as, err := a.PodResources().List(ctx)
	if err != nil {
		// No kubelet on this node: nothing can be allocated. A kubelet
		// that does not answer: we cannot tell, so refuse.
		if _, statErr := os.Stat(a.PodResources().Socket()); statErr == nil {
			return false, fmt.Errorf("sharing: cannot check allocations, try again: %w", err)
		}
	}
	for _, x := range as {
		for _, id := range x.DeviceIDs {
			allocated[id] = x.Namespace + "/" + x.Pod
		}
	}
	return a.sharing.Update(cfg, inv, allocated)
}

func (c *sharingComponent) routes(a *agent) {
	a.adminMux.HandleFunc("GET /v1/sharing", func(w http.ResponseWriter, _ *http.Request) {
		adminapi.WriteJSON(w, http.StatusOK, a.sharing.Get())
	})
	a.adminMux.HandleFunc("PUT /v1/sharing", func(w http.ResponseWriter, r *http.Request) {
		var cfg timeslice.Config
		if err := adminapi.ReadJSON(r, &cfg); err != nil {
			adminapi.WriteError(w, http.StatusBadRequest, "bad_request", err)
			return
		}
		changed, err := updateSharing(r.Context(), a, cfg)
		switch {
		case errors.Is(err, timeslice.ErrInvalid):
			adminapi.WriteError(w, http.StatusBadRequest, "invalid", err)
			return
		case err != nil:
			adminapi.WriteError(w, http.StatusConflict, "refused", err)
			return
		}
		adminapi.WriteJSON(w, http.StatusOK, map[string]bool{"changed": changed})
	})
}

// Adapters from the agent's sources to the watchdog's small interfaces.
type (
	nvmlProcesses struct{ a *agent }
	cgroupLookup  struct{ r procattr.Resolver }
	podNames      struct{ p procattr.PodLogs }
	assignments   struct{ a *agent }
)

func (p nvmlProcesses) GPUProcesses(context.Context) ([]timeslice.GPUProcess, error) {
	ps, err := mig.ReadProcesses(p.a.lib)
	out := make([]timeslice.GPUProcess, len(ps))
	for i, q := range ps {
		out[i] = timeslice.GPUProcess{PID: q.PID, DeviceUUID: q.DeviceUUID, UsedBytes: q.UsedBytes}
	}
	return out, err
}

func (c cgroupLookup) Lookup(pid uint32) (timeslice.ContainerRef, error) {
	ct, err := c.r.Lookup(pid)
	return timeslice.ContainerRef{PodUID: ct.PodUID, ContainerID: ct.ContainerID}, err
}

func (p podNames) Pods() (map[string]timeslice.PodName, error) {
	refs, err := p.p.Pods()
	out := make(map[string]timeslice.PodName, len(refs))
	for uid, r := range refs {
		out[uid] = timeslice.PodName{Namespace: r.Namespace, Name: r.Name}
	}
	return out, err
}

func (s assignments) List(ctx context.Context) ([]timeslice.Assignment, error) {
	as, err := s.a.PodResources().List(ctx)
	out := make([]timeslice.Assignment, len(as))
	for i, x := range as {
		out[i] = timeslice.Assignment{Namespace: x.Namespace, Pod: x.Pod, Container: x.Container, ResourceName: x.ResourceName, DeviceIDs: x.DeviceIDs}
	}
	return out, err
}

// registerAll registers collectors, stopping at the first error.
func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
