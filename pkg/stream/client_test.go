package stream

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
	"github.com/gpud/gpud/internal/testkit/testwait"
)

// serveOn serves a new server on addr (":0" for any port) and returns it,
// its address and a stop function.
func serveOn(t *testing.T, addr string, certs *Certs) (*Server, string, func()) {
	t.Helper()
	srv := newTestServer(t, ServerConfig{})
	var ln net.Listener
	var err error
	testwait.ForErr(t, 5*time.Second, "listen on "+addr, func() error {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, certs, nil) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	return srv, ln.Addr().String(), stop
}

func newTestClient(t *testing.T, addr string, certs *Certs, samples func() *telemetryv1.Samples) *Client {
	t.Helper()
	var hellos atomic.Int32
	tokenPath := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenPath, []byte(tokenFor("node-a")+"\n"))
	c, err := NewClient(Config{Addr: addr, Node: "node-a", Certs: certs, Token: TokenFile(tokenPath), ServerName: "localhost", Interval: 100 * time.Millisecond,
		MaxSamples: 2, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		Hello:   func() *telemetryv1.Hello { hellos.Add(1); return testHello() },
		Samples: samples})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientReconnectsAndResendsHello(t *testing.T) {
	p := newPKI(t)
	serverCerts := loadCerts(t, p.serverFiles())
	srv, addr, stop := serveOn(t, "127.0.0.1:0", serverCerts)
	var used atomic.Uint64
	c := newTestClient(t, addr, loadCerts(t, p.agentFiles()), func() *telemetryv1.Samples { return testSamples(used.Add(1 << 20)) })
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Collectors()...)
	testwait.Run(t, "stream client", c.Run)

	testwait.For(t, 10*time.Second, "samples to reach the scheduler", func() bool {
		n := srv.Telemetry(time.Now(), 3)["node-a"]
		return n != nil && n.Devices[testGPU].MemoryUsedBytes > 0
	})
	stop() // the scheduler goes away (a leader change)
	testwait.For(t, 5*time.Second, "the client to notice", func() bool { return !c.Connected() })

	// While it is away: an event, which must not block, and samples
	// beyond the queue's two, which are dropped oldest first.
	start := time.Now()
	c.Event(&telemetryv1.Event{Kind: telemetryv1.Event_KIND_XID, DeviceUuid: testGPU, Xid: 48, Health: telemetryv1.Health_HEALTH_UNHEALTHY})
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("Event blocked %s without a scheduler", d)
	}
	testwait.For(t, 5*time.Second, "samples to be dropped", func() bool {
		return testutil.ToFloat64(c.m.samplesDropped) > 0
	})

	srv2, _, _ := serveOn(t, addr, serverCerts) // the new leader, same Service address
	testwait.For(t, 10*time.Second, "the client to reconnect with its hello and the queued event", func() bool {
		n := srv2.Telemetry(time.Now(), 3)["node-a"]
		return n != nil && len(n.Devices) == 2 && n.Devices[testGPU].Unhealthy
	})
	if !c.Connected() {
		t.Error("Connected() false after the reconnect")
	}
	if got := testutil.ToFloat64(c.m.reconnects); got < 1 {
		t.Errorf("gpud_stream_reconnects_total %v, want at least 1", got)
	}
	var out strings.Builder
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		out.WriteString(mf.GetName() + "\n")
	}
	for _, want := range []string{"gpud_stream_samples_dropped_total", "gpud_stream_connected", "gpud_stream_queued", "gpud_stream_messages_sent_total"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("agent metrics lack %s:\n%s", want, out.String())
		}
	}
}

func TestClientConfigValidate(t *testing.T) {
	ok := Config{Addr: "sched:9403", Node: "node-a", Insecure: true, Hello: testHello, Samples: func() *telemetryv1.Samples { return nil }}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"no port", func(c *Config) { c.Addr = "sched" }},
		{"bad node", func(c *Config) { c.Node = "Node_A" }},
		{"no certificates", func(c *Config) { c.Insecure = false }},
		{"interval too short", func(c *Config) { c.Interval = time.Millisecond }},
		{"no hello", func(c *Config) { c.Hello = nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			if err := c.Validate(); err == nil {
				t.Fatal("Validate() = nil")
			}
		})
	}
}

// TestClientRereadsTokenFile: the token is read for every connection, so
// the one the kubelet rotated in place is used from the next reconnect
// on: a stream refused for an expired token connects once the file holds
// a valid one, without restarting the client.
func TestClientRereadsTokenFile(t *testing.T) {
	p := newPKI(t)
	srv := newTestServer(t, ServerConfig{})
	addr := startServer(t, srv, loadCerts(t, p.serverFiles()))
	path := filepath.Join(t.TempDir(), "token")
	writeFile(t, path, []byte("expired"))
	c, err := NewClient(Config{Addr: addr, Node: "node-a", Certs: loadCerts(t, p.agentFiles()), Token: TokenFile(path), ServerName: "localhost",
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Hello: testHello, Samples: func() *telemetryv1.Samples { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "stream client", c.Run)
	testwait.For(t, 10*time.Second, "the expired token to be refused", func() bool {
		return testutil.ToFloat64(srv.m.refused.WithLabelValues(ReasonTokenInvalid)) > 0
	})
	if c.Connected() {
		t.Fatal("connected with an expired token")
	}
	writeFile(t, path, []byte(tokenFor("node-a")+"\n")) // the kubelet's rotation: an atomic rename
	testwait.For(t, 10*time.Second, "the client to connect with the rotated token", c.Connected)
	if _, ok := srv.Telemetry(time.Now(), 3)["node-a"]; !ok {
		t.Error("no telemetry of node-a after the rotation")
	}
}

func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, data string
		want       string // "" refused
	}{
		{"JWT with a newline", "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln\n", "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"},
		{"empty", "", ""},
		{"spaces inside", "a b", ""},
		{"too large", strings.Repeat("a", MaxTokenBytes+1), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			writeFile(t, path, []byte(tc.data))
			got, err := TokenFile(path)()
			if got != tc.want || (err == nil) != (tc.want != "") {
				t.Fatalf("TokenFile() = %q, %v; want %q", got, err, tc.want)
			}
			if err != nil && !errors.Is(err, ErrConfig) {
				t.Errorf("error %v does not match ErrConfig", err)
			}
		})
	}
	if _, err := TokenFile(filepath.Join(dir, "missing"))(); !errors.Is(err, ErrConfig) {
		t.Errorf("missing file: %v", err)
	}
}
