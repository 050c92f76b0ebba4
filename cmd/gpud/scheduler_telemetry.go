package main

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/gpud/gpud/pkg/scheduler/decide"
	"github.com/gpud/gpud/pkg/stream"
)

// schedulerTelemetryOptions are the telemetry stream's flags of
// `gpud scheduler`, and the decision flags that use the stream.
type schedulerTelemetryOptions struct {
	addr          string
	tls           stream.CertFiles
	insecure      bool
	overcommit    bool
	overcommitPct int
}

func (o *schedulerTelemetryOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.addr, "telemetry-addr", "", "listen address of the telemetry stream (gRPC) the agents connect to (--scheduler-addr), e.g. :9403; only the leader takes streams; empty: no stream, decisions use ResourceSlices and claims alone")
	fs.StringVar(&o.tls.Cert, "tls-cert", "", "PEM certificate of the telemetry listener (the scheduler Service's name in its SANs); reloaded when the file changes")
	fs.StringVar(&o.tls.Key, "tls-key", "", "PEM private key of --tls-cert; reloaded when the file changes")
	fs.StringVar(&o.tls.CA, "tls-ca", "", "PEM CA bundle that signs the agents' client certificates (CN system:node:<node> or a SAN naming the node); reloaded when the file changes")
	fs.BoolVar(&o.insecure, "telemetry-insecure", false, "serve the telemetry stream without TLS and trust the node name each agent sends (tests only: any pod could report for any node)")
	fs.BoolVar(&o.overcommit, "overcommit", false, "let a fraction take GPU memory its tenants requested but, as the telemetry stream measures it, do not use (measured headroom less --overcommit-margin-percent)")
	fs.IntVar(&o.overcommitPct, "overcommit-margin-percent", 0, "share of a GPU's memory --overcommit keeps free of the measured use; 0 is the default (10)")
}

func (o *schedulerTelemetryOptions) validate() []error {
	var errs []error
	if o.overcommitPct < 0 || o.overcommitPct > 90 {
		errs = append(errs, flagErr("overcommit-margin-percent", "%d: want 0 to 90", o.overcommitPct))
	}
	anyTLS := o.tls.Cert != "" || o.tls.Key != "" || o.tls.CA != ""
	if o.addr == "" {
		if anyTLS || o.insecure {
			errs = append(errs, flagErr("telemetry-addr", "empty, but --tls-* or --telemetry-insecure given: set the listen address (:9403)"))
		}
		return errs
	}
	if err := validateAddr("telemetry-addr", o.addr); err != nil {
		errs = append(errs, err)
	}
	switch {
	case o.insecure && anyTLS:
		errs = append(errs, flagErr("telemetry-insecure", "given with --tls-cert/--tls-key/--tls-ca: choose mutual TLS or none"))
	case !o.insecure:
		if err := o.tls.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--telemetry-addr %s needs mutual TLS (or --telemetry-insecure, for tests): %w", o.addr, err))
		}
	}
	return errs
}

// decideConfig sets the decision flags on cfg.
func (o *schedulerTelemetryOptions) decideConfig(cfg decide.Config) decide.Config {
	cfg.Overcommit, cfg.OvercommitMarginPercent = o.overcommit, o.overcommitPct
	return cfg
}

// newServer loads the certificates and returns the telemetry server; nil,
// nil without --telemetry-addr. ready and wake are the scheduler's.
func (o *schedulerTelemetryOptions) newServer(ready func() bool, wake func(), log *slog.Logger) (*stream.Server, *stream.Certs, error) {
	if o.addr == "" {
		return nil, nil, nil
	}
	log = log.With("component", "telemetry")
	var certs *stream.Certs
	if o.insecure {
		log.Warn("telemetry stream without TLS: any client can report for any node (--telemetry-insecure)", "addr", o.addr)
	} else {
		var err error
		if certs, err = stream.LoadCerts(o.tls, log); err != nil {
			return nil, nil, fmt.Errorf("--tls-cert/--tls-key/--tls-ca: %w", err)
		}
	}
	srv, err := stream.NewServer(stream.ServerConfig{Ready: ready, Insecure: o.insecure, OnHealthChange: wake, Log: log})
	if err != nil {
		return nil, nil, err
	}
	return srv, certs, nil
}
