// Package apiwait makes an API client's reads wait out an API-server
// outage instead of failing.
//
// An informer whose list or watch fails hands the error to client-go's
// reflector, which backs off exponentially (0.8 s doubling to 30 s, with
// jitter): after a 20 s outage a standby scheduler's informers came back
// up to 32 s after the API server did, and the pods created meanwhile
// waited that long. A client whose GETs retry a refused connection every
// second, for as long as the caller's context lasts, never shows the
// reflector an error, so its informers resume within a second of the
// server's return. Only reads retry: a write's caller decides itself.
package apiwait

import (
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/gpud/gpud/internal/wait"
)

// DefaultInterval is how often a read is retried while the API server is
// unreachable.
const DefaultInterval = time.Second

// Transport retries GET requests whose round trip fails (no response: the
// connection was refused, reset or timed out) every Interval until one
// gets a response or the request's context ends. Other methods, and
// responses of any status, pass through.
type Transport struct {
	Next     http.RoundTripper
	Interval time.Duration
	Log      *slog.Logger

	mu sync.Mutex
	// down is when the current outage was first seen (zero: none).
	down time.Time
	// logged is when the outage was last logged.
	logged time.Time
}

// logEvery bounds the outage log to one line per this period.
const logEvery = 30 * time.Second

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || req.Body != nil && req.Body != http.NoBody {
		return t.Next.RoundTrip(req)
	}
	interval := t.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	for {
		resp, err := t.Next.RoundTrip(req.Clone(req.Context()))
		if err == nil {
			t.up()
			return resp, nil
		}
		if req.Context().Err() != nil || errors.Is(err, req.Context().Err()) {
			return nil, err
		}
		t.failed(req, err)
		if !wait.Sleep(req.Context(), interval) {
			return nil, err
		}
	}
}

func (t *Transport) failed(req *http.Request, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if t.down.IsZero() {
		t.down = now
	}
	if t.Log != nil && now.Sub(t.logged) >= logEvery {
		t.logged = now
		t.Log.Warn("api server unreachable, reads wait for it", "host", req.URL.Host, "down_for", now.Sub(t.down).Round(time.Second), "err", err)
	}
}

func (t *Transport) up() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.down.IsZero() {
		return
	}
	if t.Log != nil {
		t.Log.Info("api server reachable again", "down_for", time.Since(t.down).Round(time.Millisecond))
	}
	t.down, t.logged = time.Time{}, time.Time{}
}

// Config returns a copy of cfg whose GETs wait out outages (see
// [Transport]); log may be nil.
func Config(cfg *rest.Config, log *slog.Logger) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &Transport{Next: rt, Interval: DefaultInterval, Log: log}
	})
	return out
}
