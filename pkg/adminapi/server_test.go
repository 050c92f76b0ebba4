package adminapi

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "g")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func TestServerAndClient(t *testing.T) {
	path := filepath.Join(shortDir(t), "run", "admin.sock")
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/echo", func(w http.ResponseWriter, r *http.Request) {
		var in map[string]string
		if err := ReadJSON(r, &in); err != nil {
			WriteError(w, http.StatusBadRequest, "bad_request", err)
			return
		}
		if in["fail"] != "" {
			WriteError(w, http.StatusConflict, "refused", errors.New(in["fail"]))
			return
		}
		WriteJSON(w, http.StatusOK, in)
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- (&Server{Path: path, Handler: mux}).Run(ctx) }()
	c := NewClient(path, 10*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	var out map[string]string
	for {
		err := c.Call(t.Context(), "POST", "/v1/echo", map[string]string{"a": "b"}, &out)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNoAgent) || time.Now().After(deadline) {
			t.Fatalf("Call: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
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
	if err := (&Server{Path: path, Handler: mux}).Run(t.Context()); err == nil {
		t.Error("a second server on a live socket started; want an error")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if err := c.Call(t.Context(), "GET", "/v1/echo", nil, nil); !errors.Is(err, ErrNoAgent) {
		t.Errorf("call with no agent = %v, want ErrNoAgent", err)
	}
}

func TestServerReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(shortDir(t), "admin.sock")
	// A crashed agent leaves its socket file behind with nobody listening.
	ln, err := listenUnixPrivate(path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(interface{ SetUnlinkOnClose(bool) }).SetUnlinkOnClose(false)
	_ = ln.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, _ *http.Request) { WriteJSON(w, http.StatusOK, "ok") })
	go func() { done <- (&Server{Path: path, Handler: mux}).Run(ctx) }()
	c := NewClient(path, 10*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var s string
		err := c.Call(t.Context(), "GET", "/ok", nil, &s)
		if err == nil && s == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server on a stale socket path never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
