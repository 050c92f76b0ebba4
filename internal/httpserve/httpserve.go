// Package httpserve serves an http.Handler on a listener for as long as a
// context lives: the one lifecycle of gpud's plain HTTP servers (the
// agent's /metrics, /readyz and /inventory; the scheduler's metrics). The
// admin socket has its own (it drains requests before removing its
// socket).
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// ShutdownTimeout is how long Serve waits for requests in flight once its
// context ends.
const ShutdownTimeout = 5 * time.Second

// Serve serves h on ln until ctx ends, then shuts down, giving requests in
// flight ShutdownTimeout; it returns nil then. A failure to serve ends it
// early with an error naming what (for example "--http-addr"). The
// server's own errors go to log at level error (log may be nil).
func Serve(ctx context.Context, ln net.Listener, h http.Handler, what string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", what, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown %s: %w", what, err)
	}
	return nil
}

// WithProfiling serves Go's profiles (net/http/pprof: /debug/pprof/, its
// CPU profile, heap, goroutines, trace) beside h, as kube-scheduler's
// --profiling does. The profiles tell a caller what the process runs and
// holds; serve them only where the port is not reachable by everyone.
func WithProfiling(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/", h)
	return mux
}
