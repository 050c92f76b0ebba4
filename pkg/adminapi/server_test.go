package adminapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// shortDir is a temp dir with a path short enough for a unix socket
// (108 bytes): the test's own when it is, else a short one it removes.
func shortDir(t *testing.T) string {
	t.Helper()
	if dir := t.TempDir(); len(dir) < 80 {
		return dir
	}
	dir, err := os.MkdirTemp("", "g")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// serve listens on path (synchronously, so calls can follow at once) and
// serves h until the test ends; stop ends it early and returns Serve's error.
func serve(t *testing.T, path string, h http.Handler) (s *Server, stop func() error) {
	t.Helper()
	ln, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen(%s): %v", path, err)
	}
	s = &Server{Path: path, Handler: h}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	var once bool
	var err2 error
	stop = func() error {
		if !once {
			once = true
			cancel()
			err2 = <-done
		}
		return err2
	}
	t.Cleanup(func() { _ = stop() })
	return s, stop
}

func echoMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/echo", func(w http.ResponseWriter, r *http.Request) {
		var in map[string]string
		if DecodeJSON(w, r, &in) != nil {
			return
		}
		if in["fail"] != "" {
			WriteError(w, http.StatusConflict, "refused", errors.New(in["fail"]))
			return
		}
		WriteJSON(w, http.StatusOK, in)
	})
	return mux
}

func TestServerAndClient(t *testing.T) {
	path := filepath.Join(shortDir(t), "run", "admin.sock")
	_, stop := serve(t, path, echoMux())
	c := NewClient(path, 10*time.Second)
	var out map[string]string
	if err := c.Call(t.Context(), "POST", "/v1/echo", map[string]string{"a": "b"}, &out); err != nil {
		t.Fatalf("Call: %v", err)
	}
	if out["a"] != "b" {
		t.Errorf("echo = %v", out)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("socket mode %o, want 600", perm)
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket dir mode %v (%v), want 700", fi.Mode().Perm(), err)
	}
	err = c.Call(t.Context(), "POST", "/v1/echo", map[string]string{"fail": "slice in use by ns/pod"}, nil)
	var apiErr *Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || apiErr.Code != "refused" || apiErr.Message != "slice in use by ns/pod" {
		t.Errorf("error = %#v, want 409 refused with the message", err)
	}
	if err := (&Server{Path: path, Handler: echoMux()}).Run(t.Context()); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("a second server on a live socket: %v, want an in-use error", err)
	}
	if err := stop(); err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if err := c.Call(t.Context(), "GET", "/v1/echo", nil, nil); !errors.Is(err, ErrNoAgent) {
		t.Errorf("call with no agent = %v, want ErrNoAgent", err)
	}
}

// staleSocket leaves a socket file at path with nobody listening, as a
// crashed agent does.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := listenUnixPrivate(path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = ln.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
}

func TestServerReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(shortDir(t), "admin.sock")
	staleSocket(t, path)
	if err := NewClient(path, 10*time.Second).Call(t.Context(), "POST", "/v1/echo", nil, nil); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("call on a stale socket = %v, want ErrNoAgent", err)
	}
	serve(t, path, echoMux())
	var out map[string]string
	if err := NewClient(path, 10*time.Second).Call(t.Context(), "POST", "/v1/echo", map[string]string{"k": "v"}, &out); err != nil || out["k"] != "v" {
		t.Fatalf("server on a stale socket path: %v, %v", out, err)
	}
}

func TestListenRefusesWhatIsNotASocket(t *testing.T) {
	dir := shortDir(t)
	file := filepath.Join(dir, "precious.txt")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, kind string }{{file, "regular file"}, {sub, "directory"}, {link, "symbolic link"}} {
		_, err := Listen(tc.path)
		if !errors.Is(err, ErrNotSocket) || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.kind) {
			t.Errorf("Listen(%s) = %v, want ErrNotSocket naming the path and %q", tc.path, err, tc.kind)
		}
	}
	if data, err := os.ReadFile(file); err != nil || string(data) != "keep me" {
		t.Fatalf("the regular file was touched: %q, %v", data, err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was touched: %v", err)
	}
}

func TestServerDrainsOnShutdown(t *testing.T) {
	path := filepath.Join(shortDir(t), "admin.sock")
	entered, release := make(chan struct{}), make(chan struct{})
	mux := echoMux()
	mux.HandleFunc("POST /v1/slow", func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release // a MIG apply in flight
		WriteJSON(w, http.StatusOK, "done")
	})
	s, stop := serve(t, path, mux)
	draining := make(chan struct{})
	s.closing = func() { close(draining) }
	c := NewClient(path, 10*time.Second)
	slow := make(chan error, 1)
	go func() {
		var out string
		slow <- c.Call(t.Context(), "POST", "/v1/slow", nil, &out)
	}()
	<-entered
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	<-draining

	err := c.Call(t.Context(), "POST", "/v1/echo", map[string]string{"a": "b"}, nil)
	var apiErr *Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable || apiErr.Code != "shutting_down" || errors.Is(err, ErrNoAgent) {
		t.Fatalf("call while the agent shuts down = %v, want 503 shutting_down (not ErrNoAgent)", err)
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatalf("request in flight during shutdown: %v, want its answer", err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := c.Call(t.Context(), "POST", "/v1/echo", nil, nil); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("call after shutdown = %v, want ErrNoAgent", err)
	}
}
