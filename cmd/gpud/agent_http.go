package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpud/gpud/internal/httpserve"
	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/gpu"
)

// httpOptions are the HTTP server's flags.
type httpOptions struct{ addr string }

func (o *httpOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.addr, "http-addr", "127.0.0.1:9400", "address of the HTTP server (/healthz, /readyz, /inventory, /metrics); empty disables it")
}

func (o *httpOptions) validate() []error {
	if err := validateAddr("http-addr", o.addr); err != nil {
		return []error{err}
	}
	return nil
}

// httpServer serves /healthz, /readyz, /inventory and /metrics. /readyz
// answers 200 once the inventory was read and every ready check passes,
// else 503 with why not.
type httpServer struct {
	addr      string
	inventory func() (gpu.Inventory, bool)
	metrics   *prometheus.Registry
	// enforcement is a line for /readyz (what is enforced, or why not);
	// nil when enforcement is off.
	enforcement enforceStatus
	// ready are the components' readiness checks beyond the inventory:
	// each returns nil when its component does its job, else why not
	// (the DRA driver: its ResourceSlices are in the API server).
	ready []func() error
	log   *slog.Logger
}

func (s *httpServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if _, ok := s.inventory(); !ok {
			http.Error(w, "inventory not read yet", http.StatusServiceUnavailable)
			return
		}
		// The body is for people: why not ready, one line per reason,
		// else "ok"; then what is enforced, ready or not.
		code, lines := http.StatusOK, []string{"ok"}
		var why []string
		for _, ready := range s.ready {
			if err := ready(); err != nil {
				why = append(why, err.Error())
			}
		}
		if len(why) > 0 {
			code, lines = http.StatusServiceUnavailable, why
		}
		if s.enforcement != nil {
			lines = append(lines, s.enforcement())
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(strings.Join(lines, "\n") + "\n"))
	})
	mux.HandleFunc("GET /inventory", func(w http.ResponseWriter, _ *http.Request) {
		inv, ok := s.inventory()
		if !ok {
			http.Error(w, "inventory not read yet", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(inv)
	})
	return mux
}

// Run serves until ctx ends, then shuts down within 5 seconds.
func (s *httpServer) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen on --http-addr %s: %w", s.addr, err)
	}
	s.log.Info("http server listening", "addr", ln.Addr().String())
	return httpserve.Serve(ctx, ln, s.handler(), "--http-addr", s.log)
}

// adminOptions are the admin API's flags.
type adminOptions struct{ socket string }

func (o *adminOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.socket, "admin-socket", adminapi.DefaultSocket, "unix socket of the local admin API (gpud mig plan/apply, GET and PUT /v1/sharing); mode 0600, root only; empty disables it")
}

func (o *adminOptions) validate() []error {
	if err := validateSocketPath("admin-socket", o.socket); err != nil {
		return []error{err}
	}
	return nil
}
