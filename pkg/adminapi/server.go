// Package adminapi is the agent's local admin API: JSON over HTTP on a unix
// socket that only root (and the agent's own user) may use. `gpud mig
// apply` and `gpud sharing` talk to the running agent through it. It owns
// the socket's lifecycle and permissions, and the JSON conventions; the
// routes belong to the components that mount them.
package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// DefaultSocket is where the agent listens unless told otherwise.
const DefaultSocket = "/run/gpud/admin.sock"

// Server serves Handler on the unix socket at Path.
type Server struct {
	// Path is the socket path (under 108 bytes).
	Path string
	// Handler serves the routes.
	Handler http.Handler
	// Log may be nil.
	Log *slog.Logger
}

// Run listens until ctx ends, then shuts down within 5 seconds and removes
// the socket. The socket is created with mode 0600 in a directory of mode
// 0700 when it creates one; connections from users other than root and the
// server's own are closed unanswered. A stale socket left by a crash is
// replaced; a live one is an error, since another agent owns it.
func (s *Server) Run(ctx context.Context) error {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := listen(s.Path)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           s.Handler,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelError),
	}
	log.Info("admin api listening", "socket", s.Path)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(&peerCheckListener{Listener: ln, log: log}) }()
	select {
	case err := <-errc:
		return fmt.Errorf("adminapi: serve %s: %w", s.Path, err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	_ = os.Remove(s.Path)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("adminapi: shutdown: %w", err)
	}
	return nil
}

func listen(path string) (net.Listener, error) {
	if path == "" {
		return nil, errors.New("adminapi: empty socket path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("adminapi: socket dir: %w", err)
	}
	if _, err := os.Stat(path); err == nil {
		if c, derr := net.DialTimeout("unix", path, time.Second); derr == nil {
			_ = c.Close()
			return nil, fmt.Errorf("adminapi: %s is in use: is another gpud agent running?", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("adminapi: remove stale socket: %w", err)
		}
	}
	ln, err := listenUnixPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("adminapi: listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("adminapi: chmod %s: %w", path, err)
	}
	return ln, nil
}

// peerCheckListener drops connections from users the API is not for.
type peerCheckListener struct {
	net.Listener
	log *slog.Logger
}

func (l *peerCheckListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if uid, ok := peerAllowed(c); !ok {
			l.log.Warn("admin api connection refused", "peer_uid", uid)
			_ = c.Close()
			continue
		}
		return c, nil
	}
}

// Error is the JSON body of a failed call.
type Error struct {
	// Status is the HTTP status; Message says what failed and what to do.
	Status  int    `json:"status"`
	Message string `json:"error"`
	// Code is a machine-readable reason ("busy", "no_fit", "bad_layout",
	// "refused") when there is one.
	Code string `json:"code,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// WriteJSON writes v as the JSON response with the status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// WriteError writes err as an *Error response.
func WriteError(w http.ResponseWriter, status int, code string, err error) {
	WriteJSON(w, status, &Error{Status: status, Message: err.Error(), Code: code})
}

// ReadJSON decodes a request body of at most 4 MiB into v, rejecting
// unknown fields.
func ReadJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 4<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("adminapi: request body: %w", err)
	}
	return nil
}
