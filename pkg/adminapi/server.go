// Package adminapi is the agent's local admin API: JSON over HTTP on a unix
// socket that only root (and the agent's own user) may use. `gpud mig plan`
// and `gpud mig apply` talk to the running agent through it, and so does
// anything that GETs or PUTs /v1/sharing. It owns the socket's lifecycle
// and permissions, and the JSON conventions; the routes belong to the
// components that mount them.
package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
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

	closing func() // test hook: called once draining has begun
}

// Run is [Listen] then [Server.Serve].
func (s *Server) Run(ctx context.Context) error {
	ln, err := Listen(s.Path)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln (from [Listen] on s.Path) until ctx ends, then drains:
// the socket stays open and requests that arrive get 503 "shutting_down"
// (so a CLI reports that the agent is stopping instead of acting without
// it) while requests in flight get up to 5 seconds to finish; then the
// socket is removed and the server stops. Connections from users other
// than root and the server's own are closed unanswered.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var d drain
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !d.enter() {
				w.Header().Set("Connection", "close")
				WriteError(w, http.StatusServiceUnavailable, "shutting_down", errors.New("the agent is shutting down: try again when it is back"))
				return
			}
			defer d.leave()
			s.Handler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelError),
	}
	log.Info("admin api listening", "socket", s.Path)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(&peerCheckListener{Listener: ln, log: log}) }()
	select {
	case err := <-errc:
		_ = os.Remove(s.Path)
		return fmt.Errorf("adminapi: serve %s: %w", s.Path, err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	idle := d.close()
	if s.closing != nil {
		s.closing()
	}
	select {
	case <-idle:
	case <-shutdownCtx.Done():
	}
	_ = os.Remove(s.Path) // from here on a client finds no agent
	err := srv.Shutdown(shutdownCtx)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = srv.Close()
		return fmt.Errorf("adminapi: shutdown: %w", err)
	}
	return nil
}

// drain counts requests in flight and refuses new ones once closed.
type drain struct {
	mu      sync.Mutex
	closing bool
	n       int
	idle    chan struct{}
}

func (d *drain) enter() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closing {
		return false
	}
	d.n++
	return true
}

func (d *drain) leave() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n--
	if d.closing && d.n == 0 && d.idle != nil {
		close(d.idle)
		d.idle = nil
	}
}

// close refuses new requests and returns a channel closed when none is in
// flight.
func (d *drain) close() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closing = true
	ch := make(chan struct{})
	if d.n == 0 {
		close(ch)
	} else {
		d.idle = ch
	}
	return ch
}

// Listen creates the admin socket at path with mode 0600, in a directory
// of mode 0700 when it creates one. A stale socket left by a crash is
// replaced; a live one is an error (another agent owns it), and so is a
// path that holds anything but a socket: it is never removed.
func Listen(path string) (net.Listener, error) {
	if path == "" {
		return nil, errors.New("adminapi: empty socket path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("adminapi: socket dir: %w", err)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
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

// removeStaleSocket removes a socket at path that nobody listens on. A
// path that is missing is fine; one that holds a file, directory or link
// is refused.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("adminapi: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%w: %s is a %s; pass an --admin-socket path that is free or an old socket", ErrNotSocket, path, kind(fi.Mode()))
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		_ = c.Close()
		return fmt.Errorf("adminapi: %s is in use: is another gpud agent running?", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("adminapi: remove stale socket: %w", err)
	}
	return nil
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return "file of mode " + m.Type().String()
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
