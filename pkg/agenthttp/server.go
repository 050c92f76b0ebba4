// Package agenthttp is the agent's HTTP surface: /healthz, /readyz,
// /inventory and /metrics on one TCP address. It owns what each route
// answers; the components it reports on come in as functions, so it
// imports none of them.
package agenthttp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpud/gpud/internal/httpserve"
	"github.com/gpud/gpud/pkg/gpu"
)

// Server serves /healthz, /readyz, /inventory and /metrics. /readyz
// answers 200 once the inventory was read and every ready check passes,
// else 503 with why not. Set its fields before Run; it is not changed
// while it runs.
type Server struct {
	// Addr is the TCP address to listen on (--http-addr).
	Addr string
	// Inventory returns the node's inventory and whether it was read.
	Inventory func() (gpu.Inventory, bool)
	// Metrics is what /metrics serves.
	Metrics *prometheus.Registry
	// Enforcement is a line for /readyz (what is enforced, or why not);
	// nil when enforcement is off.
	Enforcement func() string
	// Ready are the components' readiness checks beyond the inventory:
	// each returns nil when its component does its job, else why not
	// (the DRA driver: its ResourceSlices are in the API server).
	Ready []func() error
	Log   *slog.Logger
}

// Handler returns the routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.Metrics, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(s.Log.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if _, ok := s.Inventory(); !ok {
			http.Error(w, "inventory not read yet", http.StatusServiceUnavailable)
			return
		}
		// The body is for people: why not ready, one line per reason,
		// else "ok"; then what is enforced, ready or not.
		code, lines := http.StatusOK, []string{"ok"}
		var why []string
		for _, ready := range s.Ready {
			if err := ready(); err != nil {
				why = append(why, err.Error())
			}
		}
		if len(why) > 0 {
			code, lines = http.StatusServiceUnavailable, why
		}
		if s.Enforcement != nil {
			lines = append(lines, s.Enforcement())
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(strings.Join(lines, "\n") + "\n"))
	})
	mux.HandleFunc("GET /inventory", func(w http.ResponseWriter, _ *http.Request) {
		inv, ok := s.Inventory()
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
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("listen on --http-addr %s: %w", s.Addr, err)
	}
	s.Log.Info("http server listening", "addr", ln.Addr().String())
	return httpserve.Serve(ctx, ln, s.Handler(), "--http-addr", s.Log)
}
