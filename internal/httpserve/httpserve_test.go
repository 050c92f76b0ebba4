package httpserve

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestServeUntilContextEnds: requests are answered while ctx lives, a
// request in flight when it ends still gets its answer, Serve returns nil,
// and the port is closed afterwards.
func TestServeUntilContextEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	inFlight, release := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, _ *http.Request) {
		close(inFlight)
		<-release
		_, _ = io.WriteString(w, "late")
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, mux, "--test-addr", nil) }()

	if body := get(t, "http://"+addr+"/ok"); body != "ok" {
		t.Fatalf("GET /ok = %q", body)
	}
	slow := make(chan string, 1)
	go func() { slow <- get(t, "http://"+addr+"/slow") }()
	<-inFlight
	cancel()
	time.Sleep(50 * time.Millisecond) // Shutdown has begun and waits for /slow
	close(release)
	if body := <-slow; body != "late" {
		t.Errorf("request in flight at shutdown got %q, want its answer", body)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve = %v, want nil after ctx ended", err)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("the port still accepts connections after Serve returned")
	}
}

// TestServeErrorNamesWhat: a listener that fails ends Serve with an
// error naming the flag.
func TestServeErrorNamesWhat(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	err = Serve(t.Context(), ln, http.NewServeMux(), "--metrics-addr", nil)
	if err == nil || !strings.Contains(err.Error(), "serve --metrics-addr") {
		t.Fatalf("Serve on a closed listener = %v, want an error naming --metrics-addr", err)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestWithProfiling: the profiles are served beside the handler, whose
// own paths still answer as before.
func TestWithProfiling(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "metrics") })
	h := WithProfiling(mux)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/metrics"); code != http.StatusOK || body != "metrics" {
		t.Errorf("/metrics: %d %q", code, body)
	}
	if code, body := get("/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("/debug/pprof/goroutine: %d %.80q", code, body)
	}
	if code, _ := get("/nothing"); code != http.StatusNotFound {
		t.Errorf("/nothing: %d, want 404", code)
	}
}
