package apiwait

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// downThenUp reserves an address nobody listens on (connections are
// refused) and starts serving "ok" there after delay.
func downThenUp(t *testing.T, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })}
	started, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(started)
		select {
		case <-stop:
			return
		case <-time.After(delay):
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen again on %s: %v", addr, err)
			return
		}
		go func() { _ = srv.Serve(ln) }()
	}()
	t.Cleanup(func() {
		close(stop)
		<-started
		_ = srv.Close()
	})
	return "http://" + addr
}

func client(interval time.Duration) *http.Client {
	return &http.Client{Transport: &Transport{Next: &http.Transport{DisableKeepAlives: true}, Interval: interval}}
}

// TestGetWaitsForTheServer: a GET sent while the server is down gets the
// server's answer once it is up, instead of the refusal.
func TestGetWaitsForTheServer(t *testing.T) {
	url := downThenUp(t, 300*time.Millisecond)
	resp, err := client(20 * time.Millisecond).Get(url)
	if err != nil {
		t.Fatalf("GET while the server was down: %v, want its answer once up", err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
		t.Fatalf("body %q", b)
	}
}

// TestWritesAndEndedContextsFail: a POST is not retried (its caller
// decides), and a GET stops waiting when its context ends.
func TestWritesAndEndedContextsFail(t *testing.T) {
	url := downThenUp(t, time.Hour)
	c := client(10 * time.Millisecond)
	if _, err := c.Post(url, "text/plain", strings.NewReader("x")); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("POST to a down server = %v, want the refusal at once", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	done := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("GET to a server that never comes up succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("GET went on waiting after its context ended")
	}
}
