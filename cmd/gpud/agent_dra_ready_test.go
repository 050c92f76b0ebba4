package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/agenthttp"
	"github.com/gpud/gpud/pkg/simnode"
)

// readyz is the agent's /readyz: its status code and body.
func readyz(t *testing.T, addr string) (int, string, error) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// A DRA agent that cannot reach the API server publishes nothing, so it is
// not ready, and /readyz names the API server's error (the whole agent, as
// the DaemonSet runs it, with a kubeconfig for an address nothing listens
// on).
func TestDRAAgentNotReadyWithoutAPIServer(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- runAgent(ctx, draArgs(t, dir, "--simulate", "dgx-h100", "--http-addr", addr, "--log-level", "error"), io.Discard, io.Discard)
	}()
	var body string
	testwait.ForErr(t, 30*time.Second, "/readyz to say why the agent is not ready", func() error {
		code, b, err := readyz(t, addr)
		if err != nil {
			return err
		}
		body = b
		if code != http.StatusServiceUnavailable || !strings.Contains(b, "list resource slices") {
			return fmt.Errorf("/readyz %d %q", code, b)
		}
		return nil
	})
	if !strings.Contains(body, "not published yet") || !strings.Contains(body, "127.0.0.1:1") {
		t.Errorf("/readyz body %q: want it to say the slices are not published and name the API server's address", body)
	}
	// It stays not ready: the publish is retried, never assumed.
	time.Sleep(time.Second)
	if code, b, err := readyz(t, addr); err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("/readyz a second later: %d %q %v, want still 503", code, b, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop after cancel")
	}
}

// The wired driver on a fake API server that goes away and comes back:
// ready once its slices are in the API server, still ready after one failed
// check, not ready (naming the error) once the failures last, ready again
// when the API server is back.
func TestDRAReadinessFollowsPublishedSlices(t *testing.T) {
	var down atomic.Bool
	refused := errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
	var lists atomic.Int64
	w := startWiredDriver(t, func(t *testing.T, _ *simnode.Node, _ *draOptions, deps *draDeps) {
		deps.publishCheck = 100 * time.Millisecond
		deps.client.(*fake.Clientset).PrependReactor("*", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetVerb() == "list" {
				lists.Add(1)
			}
			if down.Load() {
				return true, nil, refused
			}
			return false, nil, nil
		})
	})
	srv := &agenthttp.Server{Inventory: w.store.Inventory, Metrics: prometheus.NewRegistry(), Ready: []func() error{w.drv.Published}, Log: quietLog()}
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	testwait.For(t, 30*time.Second, "/readyz 200 once the slices are in the API server", func() bool {
		code, _ := get()
		return code == http.StatusOK
	})

	// One failed check is not enough to flap.
	down.Store(true)
	before := lists.Load()
	testwait.For(t, 10*time.Second, "a failed check", func() bool { return lists.Load() > before })
	if code, body := get(); code != http.StatusOK {
		t.Errorf("/readyz after one failed check = %d %q, want still 200", code, body)
	}
	testwait.For(t, 10*time.Second, "/readyz 503 once the failures last", func() bool {
		code, _ := get()
		return code == http.StatusServiceUnavailable
	})
	if _, body := get(); !strings.Contains(body, "connection refused") || !strings.Contains(body, "not in the API server") {
		t.Errorf("/readyz body %q: want why (not in the API server) and the error", body)
	}

	down.Store(false)
	testwait.For(t, 30*time.Second, "/readyz 200 when the API server is back", func() bool {
		code, _ := get()
		return code == http.StatusOK
	})
}
