package main

import (
	"flag"
	"fmt"
	"log/slog"

	"k8s.io/client-go/rest"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/pkg/scheduler/decide"
	"github.com/gpud/gpud/pkg/stream"
	"github.com/gpud/gpud/pkg/stream/schedserver"
	"github.com/gpud/gpud/pkg/stream/tokenauth"
)

// schedulerTelemetryOptions are the telemetry stream's flags of
// `gpud scheduler`, and the decision flags that use the stream.
type schedulerTelemetryOptions struct {
	addr          string
	tls           stream.CertFiles
	insecure      bool
	audience      string
	agentSAs      string
	overcommit    bool
	overcommitPct int
}

func (o *schedulerTelemetryOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.addr, "telemetry-addr", "", "listen address of the telemetry stream (gRPC) the agents connect to (--scheduler-addr), e.g. :9403; only the leader takes streams; empty: no stream, decisions use ResourceSlices and claims alone")
	fs.StringVar(&o.tls.Cert, "tls-cert", "", "PEM certificate of the telemetry listener (the scheduler Service's name in its SANs); reloaded when the file changes")
	fs.StringVar(&o.tls.Key, "tls-key", "", "PEM private key of --tls-cert; reloaded when the file changes")
	fs.StringVar(&o.tls.CA, "tls-ca", "", "PEM CA bundle that signs the agents' client certificate (it proves a gpud agent; each agent's node is proven by its ServiceAccount token); reloaded when the file changes")
	fs.BoolVar(&o.insecure, "telemetry-insecure", false, "serve the telemetry stream without TLS or tokens and trust the node name each agent sends (tests only: any pod could report for any node)")
	fs.StringVar(&o.audience, "telemetry-token-audience", tokenauth.DefaultAudience, "audience of the agents' projected ServiceAccount tokens (the DaemonSet's serviceAccountToken volume); each stream's token is checked with a TokenReview for it")
	fs.StringVar(&o.agentSAs, "telemetry-agent-service-accounts", tokenauth.DefaultServiceAccount, "comma-separated namespace/name of the ServiceAccounts the agents run as: a token of any other is refused")
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
	if err := (tokenauth.Config{Audience: o.audience, ServiceAccounts: splitList(o.agentSAs)}).Validate(); err != nil {
		errs = append(errs, flagErr("telemetry-agent-service-accounts", "or --telemetry-token-audience: %w", err))
	}
	if len(splitList(o.agentSAs)) == 0 {
		errs = append(errs, flagErr("telemetry-agent-service-accounts", "%s: no ServiceAccount", printable.Quote(o.agentSAs)))
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

// withOvercommit sets --overcommit and its margin on cfg.
func withOvercommit(o *schedulerTelemetryOptions, cfg decide.Config) decide.Config {
	cfg.Overcommit, cfg.OvercommitMarginPercent = o.overcommit, o.overcommitPct
	return cfg
}

// newTelemetryServer returns the telemetry server of o's flags; nil, nil
// without --telemetry-addr. It is built before the scheduler (which reads
// it) and served for it ([stream.Leader]).
func newTelemetryServer(o *schedulerTelemetryOptions, restCfg *rest.Config, log *slog.Logger) (*stream.Server, *stream.Certs, error) {
	if o.addr == "" {
		return nil, nil, nil
	}
	log = log.With("component", "telemetry", "addr", o.addr)
	srv, certs, err := schedserver.New(schedserver.Options{Insecure: o.insecure, TLS: o.tls, Audience: o.audience, ServiceAccounts: splitList(o.agentSAs)}, restCfg, log)
	if err != nil {
		return nil, nil, fmt.Errorf("--telemetry-addr %s: %w", o.addr, err)
	}
	return srv, certs, nil
}
