// Package sharingctl runs the GPU sharing runtime (pkg/timeslice) in the
// agent: the memory watchdog with its metrics, --sharing-config applied
// again when the file changes, and GET/PUT /v1/sharing on the admin
// socket. Every change goes through the runtime's Update, which refuses a
// config invalid for the node or one that takes away an allocated replica.
package sharingctl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpud/gpud/internal/filewatch"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/memwatch"
	"github.com/gpud/gpud/pkg/sharingfile"
	"github.com/gpud/gpud/pkg/timeslice"
)

// Config configures a [Controller].
type Config struct {
	// Runtime is the node's sharing runtime. Required.
	Runtime *timeslice.Runtime
	// Inventory is the node's current GPU inventory. Required.
	Inventory func() gpu.Inventory
	// File is --sharing-config, watched and applied again when it
	// changes; empty watches nothing.
	File string
	// Watchdog configures the memory watchdog; its Sharing and Inventory
	// are filled in from Runtime and Inventory, and Kill, when nil, is
	// SIGKILL.
	Watchdog memwatch.WatchdogConfig
	// Metrics receives the watchdog's metrics. Required.
	Metrics prometheus.Registerer
	// Log may be nil.
	Log *slog.Logger
}

// Controller runs the memory watchdog and keeps the sharing runtime in
// step with File. Run it once.
type Controller struct {
	cfg Config
	wd  *memwatch.Watchdog
}

// New checks cfg, builds the watchdog and registers its metrics.
func New(cfg Config) (*Controller, error) {
	if cfg.Runtime == nil || cfg.Inventory == nil || cfg.Metrics == nil {
		return nil, errors.New("sharingctl: controller needs a Runtime, an Inventory and a metrics Registerer")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	wcfg := cfg.Watchdog
	wcfg.Sharing, wcfg.Inventory = cfg.Runtime.Sharing, cfg.Inventory
	if wcfg.Log == nil {
		wcfg.Log = cfg.Log
	}
	if wcfg.Kill == nil {
		wcfg.Kill = func(pid uint32) error { return syscall.Kill(int(pid), syscall.SIGKILL) }
	}
	wd, err := memwatch.NewWatchdog(wcfg)
	if err != nil {
		return nil, err
	}
	if err := registerAll(cfg.Metrics,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gpud_sharing_memory_over_limit_total", Help: "Times a pod went over its shares' GPU memory limit on a device."},
			func() float64 { v, _ := wd.Counts(); return float64(v) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gpud_sharing_memory_kills_total", Help: "Processes the memory watchdog killed (--enforce-memory kill)."},
			func() float64 { _, k := wd.Counts(); return float64(k) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpud_sharing_memory_over_limit", Help: "Pods over their GPU memory limit at the last check."},
			func() float64 { return float64(len(wd.Active())) }),
	); err != nil {
		return nil, fmt.Errorf("sharingctl: register metrics: %w", err)
	}
	return &Controller{cfg: cfg, wd: wd}, nil
}

// Run watches File and runs the watchdog until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	if c.cfg.File != "" {
		w := filewatch.Watcher{Paths: []string{c.cfg.File}, OnChange: func() { c.Reload(ctx) }, Log: c.cfg.Log}
		go func() {
			if err := w.Run(ctx); err != nil {
				c.cfg.Log.Warn("sharing config not watched, changes need a restart", "path", c.cfg.File, "err", err)
			}
		}()
	}
	c.cfg.Log.Info("sharing runtime started", "enforce_memory", string(c.cfg.Watchdog.Mode), "sharing_config", c.cfg.File)
	return c.wd.Run(ctx)
}

// Reload applies File again; a change that is invalid for this node or
// takes away an allocated replica is refused and logged, and the current
// config stays.
func (c *Controller) Reload(ctx context.Context) {
	cfg, err := sharingfile.LoadConfigFileFor(c.cfg.File, c.cfg.Inventory())
	if err != nil {
		c.cfg.Log.Error("sharing config invalid, keeping the current one", "err", err)
		return
	}
	if changed, err := c.cfg.Runtime.Update(ctx, cfg); err != nil {
		c.cfg.Log.Error("sharing change refused", "err", err)
	} else if changed {
		c.cfg.Log.Info("sharing config changed", "path", c.cfg.File)
	}
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
