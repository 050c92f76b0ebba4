package main

import (
	"flag"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/stream"
	"github.com/gpud/gpud/pkg/stream/agentfeed"
	"github.com/gpud/gpud/pkg/telemetry"
	"github.com/gpud/gpud/pkg/timeslice"
)

// streamOptions are the telemetry stream's flags of `gpud agent`.
type streamOptions struct {
	addr      string
	tls       stream.CertFiles
	tokenFile string
	insecure  bool
	interval  time.Duration
}

func (o *streamOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.addr, "scheduler-addr", "", "HOST:PORT of the gpud scheduler's telemetry stream (its --telemetry-addr, through the Service); empty: no stream")
	fs.StringVar(&o.tls.Cert, "tls-cert", "", "PEM client certificate of the agents for the telemetry stream, signed by the scheduler's --tls-ca (it proves a gpud agent; --stream-token-file proves the node); read again at each reconnect")
	fs.StringVar(&o.tokenFile, "stream-token-file", "", "projected ServiceAccount token of this agent's pod (audience: the scheduler's --telemetry-token-audience), which proves the node to the scheduler; read again at each reconnect (the kubelet rotates it)")
	fs.StringVar(&o.tls.Key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&o.tls.CA, "tls-ca", "", "PEM CA bundle that signs the scheduler's certificate")
	fs.BoolVar(&o.insecure, "stream-insecure", false, "stream without TLS (only to a scheduler started with --telemetry-insecure, for tests)")
	fs.DurationVar(&o.interval, "stream-interval", stream.DefaultInterval, "how often the agent streams device samples to the scheduler (events go at once); the sampler then sweeps at least this often")
}

func (o *streamOptions) validate() []error {
	anyTLS := o.tls.Cert != "" || o.tls.Key != "" || o.tls.CA != "" || o.tokenFile != ""
	var errs []error
	if o.interval < stream.MinInterval || o.interval > stream.MaxInterval {
		errs = append(errs, flagErr("stream-interval", "%s: want %s to %s", o.interval, stream.MinInterval, stream.MaxInterval))
	}
	if o.addr == "" {
		if anyTLS || o.insecure {
			errs = append(errs, flagErr("scheduler-addr", "empty, but --tls-*, --stream-token-file or --stream-insecure given: set the scheduler's HOST:PORT"))
		}
		return errs
	}
	if err := validateAddr("scheduler-addr", o.addr); err != nil {
		errs = append(errs, err)
	}
	switch {
	case o.insecure && anyTLS:
		errs = append(errs, flagErr("stream-insecure", "given with --tls-cert/--tls-key/--tls-ca/--stream-token-file: choose mutual TLS and a token, or neither"))
	case !o.insecure:
		if err := o.tls.Validate(); err != nil {
			errs = append(errs, flagErr("scheduler-addr", "%s needs mutual TLS: %w", o.addr, err))
		}
		if o.tokenFile == "" {
			errs = append(errs, flagErr("stream-token-file", "empty: the scheduler at %s needs this pod's ServiceAccount token to prove the node", o.addr))
		}
	}
	return errs
}

// streamDeps are what the stream reads on the agent.
type streamDeps struct {
	node      string
	inventory func() gpu.Inventory
	changed   func() <-chan struct{} // the inventory store's change channel
	sharing   *timeslice.Runtime     // nil: no sharing
	snapshot  func() *telemetry.Snapshot
	metrics   prometheus.Registerer
	log       *slog.Logger
}

// newStream builds the stream task; nil without --scheduler-addr. The
// certificate files are read here, before anything starts.
func newStream(o *streamOptions, deps streamDeps) (*agentfeed.Feed, error) {
	if o.addr == "" {
		return nil, nil
	}
	var certs *stream.Certs
	var token func() (string, error)
	if !o.insecure {
		var err error
		if certs, err = stream.LoadCerts(o.tls, deps.log); err != nil {
			return nil, flagErr("tls-cert", "%w", err)
		}
		token = stream.TokenFile(o.tokenFile)
		if _, err := token(); err != nil {
			return nil, flagErr("stream-token-file", "%w", err)
		}
	}
	f, err := agentfeed.New(agentfeed.Config{Inventory: deps.inventory, Changed: deps.changed, Sharing: deps.sharing, Snapshot: deps.snapshot},
		stream.Config{Addr: o.addr, Node: deps.node, Certs: certs, Token: token, Insecure: o.insecure, Interval: o.interval, Version: version, Log: deps.log})
	if err != nil {
		return nil, flagErr("scheduler-addr", "%w", err)
	}
	for _, col := range f.Collectors() {
		if err := deps.metrics.Register(col); err != nil {
			return nil, err
		}
	}
	return f, nil
}
