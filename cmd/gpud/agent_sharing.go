package main

import (
	"flag"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/memwatch"
	"github.com/gpud/gpud/pkg/sharingctl"
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
	if _, err := memwatch.ParseEnforce(o.enforce); err != nil {
		errs = append(errs, flagErr("enforce-memory", "%s: want off, report or kill", printable.Quote(o.enforce)))
	}
	if o.interval < memwatch.MinWatchdogInterval {
		errs = append(errs, flagErr("memory-watchdog-interval", "%s: want at least %s", o.interval, memwatch.MinWatchdogInterval))
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
func loadSharing(o *sharingOptions, inv gpu.Inventory) (timeslice.Config, error) {
	if o.file == "" {
		return timeslice.Config{}, nil
	}
	cfg, err := sharingfile.LoadConfigFileFor(o.file, inv)
	if err != nil {
		return cfg, flagErr("sharing-config", "%w", err)
	}
	return cfg, nil
}

// sharingControllerConfig is the sharing controller's config from the flags
// (validated) and the wiring.
func sharingControllerConfig(o *sharingOptions, rt *timeslice.Runtime, inv func() gpu.Inventory, metrics prometheus.Registerer, log *slog.Logger, wd memwatch.WatchdogConfig) sharingctl.Config {
	wd.Mode, _ = memwatch.ParseEnforce(o.enforce) // validated
	wd.Interval = o.interval
	return sharingctl.Config{Runtime: rt, Inventory: inv, File: o.file, Watchdog: wd, Metrics: metrics, Log: log}
}
