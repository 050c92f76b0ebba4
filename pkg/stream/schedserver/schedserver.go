// Package schedserver builds the telemetry stream's server the way gpud
// scheduler runs it: its certificates loaded (and reloaded when they
// change), each agent's ServiceAccount token reviewed by the API server
// through a client of its own.
package schedserver

import (
	"fmt"
	"log/slog"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpud/gpud/pkg/stream"
	"github.com/gpud/gpud/pkg/stream/tokenauth"
)

// AuthQPS is the rate of the token reviews' client (burst twice that):
// 1,000 agents streaming to a new leader are all reviewed within about
// 10 s; a reconnect within a minute hits the review cache.
const AuthQPS = 100

// Options are the server's: gpud scheduler's --tls-*, --telemetry-insecure
// and --telemetry-token-audience / --telemetry-agent-service-accounts.
type Options struct {
	// Insecure serves without TLS or tokens, trusting the node name each
	// agent sends (tests only); TLS is then empty.
	Insecure bool
	// TLS are the listener's certificate and key and the CA of the
	// agents' client certificate.
	TLS stream.CertFiles
	// Audience and ServiceAccounts are what the agents' tokens must be
	// issued for and to (see tokenauth.Config).
	Audience        string
	ServiceAccounts []string
}

// New loads the certificates and returns the server and its certificates
// (nil when Insecure; their Run reloads them when the files change). restCfg is the scheduler's
// API identity, which reviews the agents' tokens with a client of its own
// (QPS AuthQPS), so that 1,000 agents connecting at once do not wait
// behind the scheduler's writes, nor it behind them.
func New(o Options, restCfg *rest.Config, log *slog.Logger) (*stream.Server, *stream.Certs, error) {
	var certs *stream.Certs
	var auth stream.Authenticator
	if o.Insecure {
		log.Warn("telemetry stream without TLS: any client can report for any node (--telemetry-insecure)")
	} else {
		var err error
		if certs, err = stream.LoadCerts(o.TLS, log); err != nil {
			return nil, nil, fmt.Errorf("telemetry certificates: %w", err)
		}
		cfg := rest.CopyConfig(restCfg)
		cfg.QPS, cfg.Burst = AuthQPS, 2*AuthQPS
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("telemetry token reviews: API client: %w", err)
		}
		if auth, err = tokenauth.New(tokenauth.Config{Client: client, Audience: o.Audience, ServiceAccounts: o.ServiceAccounts}); err != nil {
			return nil, nil, err
		}
	}
	srv, err := stream.NewServer(stream.ServerConfig{Insecure: o.Insecure, Authenticate: auth, Log: log})
	if err != nil {
		return nil, nil, err
	}
	return srv, certs, nil
}
