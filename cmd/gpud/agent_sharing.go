package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/internal/filewatch"
	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/sharingfile"
	"github.com/gpud/gpud/pkg/timeslice"
)

// sharingOptions are the sharing runtime's and memory watchdog's flags.
type sharingOptions struct {
	file     string
	enforce  string
	interval time.Duration
}

func (o *sharingOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.file, "sharing-config", "", "YAML file of GPU sharing (default: {replicas: N}, devices: {<uuid|index>: {replicas: N}}); empty shares nothing; reread when it changes")
	fs.StringVar(&o.enforce, "enforce-memory", "report", "memory watchdog for shares with a memory limit: off, report (event + metric) or kill (also kill the offending processes)")
	fs.DurationVar(&o.interval, "memory-watchdog-interval", 10*time.Second, "how often the memory watchdog compares per-process GPU memory with the shares' limits (at least 100ms)")
}

// validate checks the flags and the file's syntax; the devices it names
// are checked against the inventory once it is read (loadSharing).
func (o *sharingOptions) validate() []error {
	var errs []error
	if _, err := timeslice.ParseEnforce(o.enforce); err != nil {
		errs = append(errs, flagErr("enforce-memory", "%s: want off, report or kill", quoteTrunc(o.enforce)))
	}
	if o.interval < timeslice.MinWatchdogInterval {
		errs = append(errs, flagErr("memory-watchdog-interval", "%s: want at least %s", o.interval, timeslice.MinWatchdogInterval))
	}
	if o.file != "" {
		if _, err := sharingfile.LoadConfigFile(o.file); err != nil {
			errs = append(errs, flagErr("sharing-config", "%w", err))
		}
	}
	return errs
}

// loadSharing reads --sharing-config and checks it against inv (every key
// a device of this node, every share fitting its device).
func (o *sharingOptions) loadSharing(inv gpu.Inventory) (timeslice.Config, error) {
	if o.file == "" {
		return timeslice.Config{}, nil
	}
	cfg, err := sharingfile.LoadConfigFileFor(o.file, inv)
	if err != nil {
		return cfg, flagErr("sharing-config", "%w", err)
	}
	return cfg, nil
}

// sharingDeps is what the sharing component needs from the wiring.
type sharingDeps struct {
	runtime   *timeslice.Runtime
	inventory func() gpu.Inventory
	watchdog  timeslice.WatchdogConfig // Sharing and Inventory are filled in
	metrics   prometheus.Registerer
	log       *slog.Logger
}

// sharingComponent runs the memory watchdog and applies --sharing-config
// again when the file changes.
type sharingComponent struct {
	opts sharingOptions
	deps sharingDeps
}

func (c *sharingComponent) Run(ctx context.Context) error {
	mode, _ := timeslice.ParseEnforce(c.opts.enforce) // validated
	wcfg := c.deps.watchdog
	wcfg.Mode, wcfg.Interval, wcfg.Log = mode, c.opts.interval, c.deps.log
	wcfg.Sharing, wcfg.Inventory = c.deps.runtime.Sharing, c.deps.inventory
	wcfg.Kill = func(pid uint32) error { return syscall.Kill(int(pid), syscall.SIGKILL) }
	wd, err := timeslice.NewWatchdog(wcfg)
	if err != nil {
		return err
	}
	if err := registerAll(c.deps.metrics,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gpud_sharing_memory_over_limit_total", Help: "Times a pod went over its shares' GPU memory limit on a device."},
			func() float64 { v, _ := wd.Counts(); return float64(v) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gpud_sharing_memory_kills_total", Help: "Processes the memory watchdog killed (--enforce-memory kill)."},
			func() float64 { _, k := wd.Counts(); return float64(k) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpud_sharing_memory_over_limit", Help: "Pods over their GPU memory limit at the last check."},
			func() float64 { return float64(len(wd.Active())) }),
	); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	if c.opts.file != "" {
		w := filewatch.Watcher{Paths: []string{c.opts.file}, OnChange: func() { c.reload(ctx) }, Log: c.deps.log}
		go func() {
			if err := w.Run(ctx); err != nil {
				c.deps.log.Warn("sharing config not watched, changes need a restart", "path", c.opts.file, "err", err)
			}
		}()
	}
	c.deps.log.Info("sharing runtime started", "enforce_memory", string(mode), "sharing_config", c.opts.file)
	return wd.Run(ctx)
}

// reload applies a changed --sharing-config; a change that is invalid for
// this node or takes away an allocated replica is refused and logged.
func (c *sharingComponent) reload(ctx context.Context) {
	cfg, err := sharingfile.LoadConfigFileFor(c.opts.file, c.deps.inventory())
	if err != nil {
		c.deps.log.Error("sharing config invalid, keeping the current one", "err", err)
		return
	}
	if changed, err := c.deps.runtime.Update(ctx, cfg); err != nil {
		c.deps.log.Error("sharing change refused", "err", err)
	} else if changed {
		c.deps.log.Info("sharing config changed", "path", c.opts.file)
	}
}

// sharingAPI serves GET and PUT /v1/sharing on the admin socket.
type sharingAPI struct{ runtime *timeslice.Runtime }

func (s sharingAPI) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/sharing", func(w http.ResponseWriter, _ *http.Request) {
		adminapi.WriteJSON(w, http.StatusOK, s.runtime.Sharing())
	})
	mux.HandleFunc("PUT /v1/sharing", s.put)
}

// put replaces the sharing config: 400 when the body is not a valid config
// for this node (naming the key), 409 when it would take away an allocated
// replica, 200 {"changed": bool} otherwise.
func (s sharingAPI) put(w http.ResponseWriter, r *http.Request) {
	cfg, err := parseSharingBody(r.Body)
	if err != nil {
		adminapi.WriteError(w, http.StatusBadRequest, "invalid", err)
		return
	}
	changed, err := s.runtime.Update(r.Context(), cfg)
	switch {
	case errors.Is(err, timeslice.ErrInvalid):
		adminapi.WriteError(w, http.StatusBadRequest, "invalid", err)
		return
	case err != nil:
		adminapi.WriteError(w, http.StatusConflict, "refused", err)
		return
	}
	adminapi.WriteJSON(w, http.StatusOK, map[string]bool{"changed": changed})
}

// parseSharingBody reads a PUT /v1/sharing body (JSON, or YAML; at most
// fileio.MaxBodyBytes) with the sharing file's strict parser.
func parseSharingBody(body io.Reader) (timeslice.Config, error) {
	data, err := io.ReadAll(io.LimitReader(body, fileio.MaxBodyBytes+1))
	if err != nil {
		return timeslice.Config{}, fmt.Errorf("read request body: %w", err)
	}
	if len(data) > fileio.MaxBodyBytes {
		return timeslice.Config{}, fmt.Errorf("%w: request body over %d bytes", timeslice.ErrInvalid, fileio.MaxBodyBytes)
	}
	return sharingfile.ParseConfig(data)
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
