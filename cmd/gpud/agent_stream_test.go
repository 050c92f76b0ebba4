package main

import (
	"context"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/internal/taskgroup"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/stream"
)

func TestAgentStreamFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string // "" valid
	}{
		{name: "off by default"},
		{name: "mutual TLS and token", args: []string{"--scheduler-addr", "gpud-scheduler:9403", "--tls-cert", "n.crt", "--tls-key", "n.key", "--tls-ca", "ca.crt", "--stream-token-file", "token"}},
		{name: "no token", args: []string{"--scheduler-addr", "gpud-scheduler:9403", "--tls-cert", "n.crt", "--tls-key", "n.key", "--tls-ca", "ca.crt"}, want: "--stream-token-file: empty"},
		{name: "insecure and token", args: []string{"--scheduler-addr", "s:9403", "--stream-insecure", "--stream-token-file", "token"}, want: "--stream-insecure"},
		{name: "insecure", args: []string{"--scheduler-addr", "127.0.0.1:9403", "--stream-insecure", "--stream-interval", "200ms"}},
		{name: "no TLS", args: []string{"--scheduler-addr", "gpud-scheduler:9403"}, want: "--scheduler-addr: gpud-scheduler:9403 needs mutual TLS"},
		{name: "no key", args: []string{"--scheduler-addr", "s:9403", "--tls-cert", "n.crt", "--tls-ca", "ca.crt"}, want: "--tls-key is empty"},
		{name: "TLS without an address", args: []string{"--tls-cert", "n.crt"}, want: "--scheduler-addr: empty"},
		{name: "insecure and TLS", args: []string{"--scheduler-addr", "s:9403", "--stream-insecure", "--tls-ca", "ca.crt"}, want: "--stream-insecure"},
		{name: "bad address", args: []string{"--scheduler-addr", "9403", "--stream-insecure"}, want: "--scheduler-addr"},
		{name: "interval too short", args: []string{"--stream-interval", "1ms"}, want: "--stream-interval: 1ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadAgentConfig(agentArgs(dir, append([]string{"--simulate", "dgx-h100"}, tc.args...)...), io.Discard)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// Certificate files are read before anything starts.
	err := runAgent(t.Context(), agentArgs(dir, "--simulate", "dgx-h100", "--http-addr", "", "--scheduler-addr", "s:9403",
		"--tls-cert", dir+"/none.crt", "--tls-key", dir+"/none.key", "--tls-ca", dir+"/ca.crt", "--stream-token-file", dir+"/token"), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "none.crt") {
		t.Fatalf("runAgent with missing certificate files = %v, want an error naming the file", err)
	}
}

func TestSchedulerTelemetryTokenFlags(t *testing.T) {
	tls := []string{"--telemetry-addr", ":9403", "--tls-cert", "s.crt", "--tls-key", "s.key", "--tls-ca", "ca.crt"}
	for _, tc := range []struct {
		name string
		args []string
		want string // "" valid
	}{
		{name: "defaults"},
		{name: "two agent ServiceAccounts", args: []string{"--telemetry-agent-service-accounts", "gpud/gpud,gpu-ops/gpud-agent", "--telemetry-token-audience", "gpud.example.com"}},
		{name: "ServiceAccount without namespace", args: []string{"--telemetry-agent-service-accounts", "gpud"}, want: "--telemetry-agent-service-accounts"},
		{name: "no ServiceAccount", args: []string{"--telemetry-agent-service-accounts", ","}, want: "no ServiceAccount"},
		{name: "audience with a space", args: []string{"--telemetry-token-audience", "a b"}, want: "audience"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, _, err := parseSchedulerFlags(append(slices.Clone(tls), tc.args...), "gpud", io.Discard)
			if tc.want == "" {
				if err != nil || o.telemetry.audience == "" {
					t.Fatalf("err = %v, options %+v", err, o.telemetry)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestAgentStreamsXidToScheduler runs the whole agent on a simulated DGX
// H100 against an in-process scheduler end: the Hello lists the node's
// GPUs, samples carry measured memory, and an injected Xid reaches the
// scheduler as an unhealthy GPU within one stream interval of the agent's
// health monitor seeing it.
func TestAgentStreamsXidToScheduler(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent")
	}
	srv, err := stream.NewServer(stream.ServerConfig{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "scheduler end", func(ctx context.Context) error { return srv.Serve(ctx, ln, nil, nil) })

	dir := t.TempDir()
	args := agentArgs(dir, "--simulate", "dgx-h100", "--node-name", "node-h100", "--http-addr", "", "--scheduler-addr", ln.Addr().String(),
		"--stream-insecure", "--stream-interval", "200ms")
	cfg, err := loadAgentConfig(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := sweepInterval(&cfg.telemetry); got != 200*time.Millisecond {
		t.Errorf("sampler interval %s with a 200ms stream, want 200ms", got)
	}
	lib, sim, closeLib, err := openNVML(cfg.nvml)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeLib)
	log := quietLog()
	src, err := newNodeSources(cfg, lib, "node-h100", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close(log) })
	tasks, err := wireAgent(cfg, args, lib, sim, src, log)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "agent", func(ctx context.Context) error { return taskgroup.Run(ctx, tasks) })

	inv := src.Store.Current()
	gpu2 := inv.GPUs[2].UUID
	testwait.For(t, 20*time.Second, "the agent's hello and samples", func() bool {
		n := srv.Telemetry(time.Now(), 3)["node-h100"]
		return n != nil && len(n.Devices) == len(inv.GPUs) && n.Devices[gpu2].MemoryTotalBytes == inv.GPUs[2].MemoryBytes &&
			n.Interval == 200*time.Millisecond && !n.Received.IsZero()
	})
	// The monitor registers its events asynchronously: repeat the Xid
	// until the store marks the GPU.
	testwait.For(t, 20*time.Second, "Xid 48 to make GPU 2 unhealthy on the agent", func() bool {
		if err := sim.InjectXid(2, 48); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		for _, g := range src.Store.Current().GPUs {
			if g.UUID == gpu2 {
				return g.Health != "Healthy"
			}
		}
		return false
	})
	seen := time.Now()
	testwait.For(t, 5*time.Second, "the scheduler to see GPU 2 unhealthy", func() bool {
		d := srv.Telemetry(time.Now(), 3)["node-h100"].Devices[gpu2]
		return d.Unhealthy && strings.Contains(d.HealthReason, "48")
	})
	if d := time.Since(seen); d > 200*time.Millisecond+100*time.Millisecond {
		t.Errorf("the scheduler saw the unhealthy GPU %s after the agent, want within one stream interval", d)
	}
}
