package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpComponent serves /healthz, /readyz, /inventory and whatever other
// components mount on the agent's mux (see agent.Handle).
type httpComponent struct {
	addr string
}

func (c *httpComponent) name() string { return "http" }

func (c *httpComponent) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "http-addr", "127.0.0.1:9400", "address of the HTTP server (/healthz, /readyz, /inventory, /metrics); empty disables it")
}

// Handle mounts an HTTP handler on the agent's server; net/http's ServeMux
// is safe to add routes to while it serves.
func (a *agent) Handle(pattern string, h http.Handler) { a.mux.Handle(pattern, h) }

func (c *httpComponent) run(ctx context.Context, a *agent) error {
	if c.addr == "" {
		<-ctx.Done()
		return nil
	}
	log := a.log.With("component", "http")
	a.mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	a.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	a.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if _, ok := a.Inventory(); !ok {
			http.Error(w, "inventory not read yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	a.mux.HandleFunc("GET /inventory", func(w http.ResponseWriter, _ *http.Request) {
		inv, ok := a.Inventory()
		if !ok {
			http.Error(w, "inventory not read yet", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(inv)
	})
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return fmt.Errorf("listen on --http-addr %s: %w", c.addr, err)
	}
	srv := &http.Server{
		Handler:           a.mux,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelError),
	}
	log.Info("http server listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
