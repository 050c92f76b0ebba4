package agenthttp

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpud/gpud/pkg/gpu"
)

// TestRoutes: what each route answers before the inventory is read, when
// a ready check fails, and when all is well.
func TestRoutes(t *testing.T) {
	inv := gpu.Inventory{Node: gpu.Node{Name: "n1"}}
	tests := []struct {
		name     string
		read     bool
		ready    []func() error
		enforce  func() string
		path     string
		wantCode int
		wantBody string
	}{
		{name: "healthz before the inventory", path: "/healthz", wantCode: 200, wantBody: "ok\n"},
		{name: "readyz before the inventory", path: "/readyz", wantCode: 503, wantBody: "inventory not read yet\n"},
		{name: "inventory before it is read", path: "/inventory", wantCode: 503, wantBody: "inventory not read yet\n"},
		{name: "ready", read: true, path: "/readyz", wantCode: 200, wantBody: "ok\n"},
		{name: "ready with enforcement", read: true, enforce: func() string { return "ebpf on /sys/fs/cgroup" }, path: "/readyz",
			wantCode: 200, wantBody: "ok\nebpf on /sys/fs/cgroup\n"},
		{name: "not ready says why, and what is enforced", read: true, path: "/readyz",
			ready:    []func() error{func() error { return nil }, func() error { return errors.New("slices not in the API server") }},
			enforce:  func() string { return "off" },
			wantCode: 503, wantBody: "slices not in the API server\noff\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{
				Inventory:   func() (gpu.Inventory, bool) { return inv, tc.read },
				Metrics:     prometheus.NewRegistry(),
				Enforcement: tc.enforce,
				Ready:       tc.ready,
				Log:         slog.New(slog.NewTextHandler(io.Discard, nil)),
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			if rec.Code != tc.wantCode || rec.Body.String() != tc.wantBody {
				t.Fatalf("GET %s = %d %q, want %d %q", tc.path, rec.Code, rec.Body.String(), tc.wantCode, tc.wantBody)
			}
		})
	}
}

// TestInventoryJSON: /inventory is the inventory as JSON.
func TestInventoryJSON(t *testing.T) {
	inv := gpu.Inventory{Node: gpu.Node{Name: "n1"}, GPUs: []gpu.GPU{{UUID: "GPU-1", Index: 0}}}
	s := &Server{Inventory: func() (gpu.Inventory, bool) { return inv, true }, Metrics: prometheus.NewRegistry(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/inventory", nil))
	var got gpu.Inventory
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("GET /inventory: %v (body %q)", err, rec.Body.String())
	}
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" || got.Node.Name != "n1" || len(got.GPUs) != 1 || got.GPUs[0].UUID != "GPU-1" {
		t.Fatalf("GET /inventory = %d %q %+v, want 200 application/json with the inventory", rec.Code, rec.Header().Get("Content-Type"), got)
	}
}
