package main

import (
	"flag"
	"time"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/pkg/telemetry"
)

// telemetryOptions are the sampler's flags.
type telemetryOptions struct {
	interval time.Duration
	compat   string
	stream   streamOptions
}

func (o *telemetryOptions) register(fs *flag.FlagSet) {
	fs.DurationVar(&o.interval, "sample-interval", 5*time.Second, "how often telemetry reads every GPU and MIG device from NVML (at least 10ms)")
	fs.StringVar(&o.compat, "metrics-compat", "dcgm", "device metric names on /metrics: dcgm (dcgm-exporter's), native (gpud_*, base units) or both")
	o.stream.register(fs)
}

// sweepInterval is the sampler's period: --sample-interval, or
// --stream-interval when the stream is on and sends more often.
func sweepInterval(o *telemetryOptions) time.Duration {
	if o.stream.addr != "" && o.stream.interval > 0 {
		return min(o.interval, o.stream.interval)
	}
	return o.interval
}

func (o *telemetryOptions) validate() []error {
	var errs []error
	if _, err := telemetry.ParseCompat(o.compat); err != nil {
		errs = append(errs, flagErr("metrics-compat", "%s: want dcgm, native or both", printable.Quote(o.compat)))
	}
	if o.interval < telemetry.MinInterval {
		errs = append(errs, flagErr("sample-interval", "%s: want at least %s", o.interval, telemetry.MinInterval))
	}
	return append(errs, o.stream.validate()...)
}
