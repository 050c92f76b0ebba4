package main

import (
	"flag"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/pkg/discovery"
)

// healthOptions are the health monitor's flags. Health is the node's: the
// monitor writes into the inventory store, and the device plugin (and any
// other publisher) reads it from there.
type healthOptions struct {
	ignoreXids     string
	recoveryPeriod time.Duration
}

func (o *healthOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.ignoreXids, "health-ignore-xids", joinXids(discovery.DefaultIgnoredXids), "comma-separated Xids that do not make a GPU unhealthy (application faults); empty ignores none")
	fs.DurationVar(&o.recoveryPeriod, "health-recovery-period", 5*time.Minute, "how long an unhealthy GPU must stay error-free before it is healthy again (a lost GPU never is); 0 means the default, 5m")
}

func (o *healthOptions) validate() []error {
	var errs []error
	if _, err := parseXids(o.ignoreXids); err != nil {
		errs = append(errs, err)
	}
	if o.recoveryPeriod < 0 {
		errs = append(errs, flagErr("health-recovery-period", "%s: must not be negative", o.recoveryPeriod))
	}
	return errs
}

// healthConfig is the monitor's HealthConfig; validate has passed.
func healthConfig(o *healthOptions) discovery.HealthConfig {
	xids, _ := parseXids(o.ignoreXids)
	return discovery.HealthConfig{IgnoredXids: xids, RecoveryPeriod: o.recoveryPeriod}
}

// parseXids parses --health-ignore-xids; empty means none ignored.
func parseXids(s string) ([]uint64, error) {
	out := []uint64{}
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		x, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil, flagErr("health-ignore-xids", "%s is not an Xid number", printable.Quote(f))
		}
		out = append(out, x)
	}
	return out, nil
}

func joinXids(xids []uint64) string {
	s := make([]string, len(xids))
	for i, x := range xids {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, ",")
}
