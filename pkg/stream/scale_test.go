package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The scale test: one server (this process) with GPUD_STREAM_SCALE
// simulated agents (1,000 by `make stream-scale`), each a real Client with
// its own node certificate over mutual TLS, streaming an 8-GPU sample
// every second, in a child process so that each side's CPU and memory are
// measured alone. Goal: server ≤ 5% of one core per 1,000 samples/s and
// ≤ 50 KiB per stream. GPUD_SCALE_HEAP_PROFILE and GPUD_SCALE_CPU_PROFILE
// name files for the server's heap profile (sampled every 4 KiB, which
// costs CPU: read the CPU figure from a run without it) and its CPU
// profile over the measured window.

const (
	scaleEnvAgents = "GPUD_STREAM_SCALE"
	scaleEnvChild  = "GPUD_STREAM_SCALE_CHILD"
	scaleWindow    = 10 * time.Second
)

type scaleFigures struct {
	CPUSeconds     float64 `json:"cpu_seconds"`
	WallSeconds    float64 `json:"wall_seconds"`
	HeapBytes      float64 `json:"heap_bytes"`
	Connected      int     `json:"connected"`
	SamplesDropped float64 `json:"samples_dropped"`
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func heapInUse() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse + m.StackInuse)
}

func TestScaleStreams(t *testing.T) {
	if os.Getenv(scaleEnvChild) != "" {
		scaleChild(t)
		return
	}
	n, _ := strconv.Atoi(os.Getenv(scaleEnvAgents))
	if n <= 0 {
		t.Skip("set " + scaleEnvAgents + "=1000 (make stream-scale) to measure the stream at scale")
	}
	if os.Getenv("GPUD_SCALE_HEAP_PROFILE") != "" {
		runtime.MemProfileRate = 4 << 10 // fine enough to see per-stream items
	}
	p := newPKI(t)
	writeFile(t, filepath.Join(p.dir, "ca.key"), p.ca.KeyPEM)
	srv := newTestServer(t, ServerConfig{})
	base := heapInUse()
	addr := startServer(t, srv, loadCerts(t, p.serverFiles()))

	out := filepath.Join(t.TempDir(), "agents.json")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestScaleStreams$", "-test.v")
	cmd.Env = append(os.Environ(), scaleEnvChild+"=1", "GPUD_SCALE_N="+strconv.Itoa(n), "GPUD_SCALE_ADDR="+addr, "GPUD_SCALE_PKI="+p.dir, "GPUD_SCALE_OUT="+out)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	testwait.For(t, 120*time.Second, fmt.Sprintf("%d agents to connect", n), func() bool { return srv.Streams() == n })
	time.Sleep(2 * time.Second) // settle: handshakes done, first samples in
	if p := os.Getenv("GPUD_SCALE_CPU_PROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer f.Close()
	}
	gcStats := func() []metrics.Sample {
		ms := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/cycles/total:gc-cycles"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}}
		metrics.Read(ms)
		return ms
	}
	gc0 := gcStats()
	cpu0, wall0 := cpuSeconds(), time.Now()
	time.Sleep(scaleWindow)
	cpu, wall := cpuSeconds()-cpu0, time.Since(wall0).Seconds()
	gc1 := gcStats()
	t.Logf("server: %.1f allocations per sample, %d GC cycles using %.3f CPU seconds in the %s window",
		float64(gc1[0].Value.Uint64()-gc0[0].Value.Uint64())/(float64(n)*wall), gc1[1].Value.Uint64()-gc0[1].Value.Uint64(),
		gc1[2].Value.Float64()-gc0[2].Value.Float64(), scaleWindow)
	pprof.StopCPUProfile()
	heap := heapInUse() - base
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("server: %d goroutines, heap in use %.1f MiB, stacks %.1f MiB", runtime.NumGoroutine(), float64(ms.HeapInuse)/(1<<20), float64(ms.StackInuse)/(1<<20))
	if p := os.Getenv("GPUD_SCALE_HEAP_PROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	fresh := len(srv.Telemetry(time.Now(), 3))
	var b []byte
	testwait.For(t, 60*time.Second, "the agents' figures", func() bool {
		select {
		case err := <-done:
			t.Fatalf("agents exited early: %v", err)
		default:
		}
		var err error
		b, err = os.ReadFile(out)
		return err == nil && len(b) > 0
	})
	cancel() // the agents wait to be stopped
	<-done
	var agents scaleFigures
	if err := json.Unmarshal(b, &agents); err != nil {
		t.Fatal(err)
	}
	samplesPerSec := float64(n) // one per agent per second
	serverCorePct := 100 * cpu / wall * 1000 / samplesPerSec
	perStreamKiB := heap / float64(n) / 1024
	t.Logf("server: %d streams, %d fresh nodes; CPU %.2f%% of one core per 1,000 samples/s; memory %.1f KiB per stream", n, fresh, serverCorePct, perStreamKiB)
	t.Logf("agents: CPU %.4f%% of one core per agent; memory %.1f KiB per agent's stream client; %.0f samples dropped", 100*agents.CPUSeconds/agents.WallSeconds/float64(n), agents.HeapBytes/float64(n)/1024, agents.SamplesDropped)
	if fresh != n {
		t.Errorf("%d of %d nodes fresh", fresh, n)
	}
	if serverCorePct > 5 {
		t.Errorf("server CPU %.2f%% of one core per 1,000 samples/s, goal 5%%", serverCorePct)
	}
	if perStreamKiB > 50 {
		t.Errorf("server memory %.1f KiB per stream, goal 50 KiB", perStreamKiB)
	}
}

// scaleChild runs the agents.
func scaleChild(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("GPUD_SCALE_N"))
	dir := os.Getenv("GPUD_SCALE_PKI")
	caCert, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := ParseCA(caCert, caKey)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{t: t, ca: ca, dir: t.TempDir()}
	writeFile(t, filepath.Join(p.dir, "ca.crt"), ca.CertPEM)
	var devs []*telemetryv1.Device
	for i := range 8 {
		devs = append(devs, &telemetryv1.Device{Uuid: fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i), Model: "NVIDIA H100 80GB HBM3", MemoryTotalBytes: 80 << 30, Health: telemetryv1.Health_HEALTH_HEALTHY})
	}
	sample := func() *telemetryv1.Samples {
		s := &telemetryv1.Samples{TakenUnixNanos: time.Now().UnixNano()}
		for i, d := range devs {
			s.Devices = append(s.Devices, &telemetryv1.DeviceSample{Uuid: d.Uuid, SmUtilPercent: ptr(float64(i * 10)), MemoryUsedBytes: ptr(uint64(i) << 30),
				PowerWatts: ptr(300.0), TemperatureCelsius: ptr(55.0)})
		}
		return s
	}
	var clients []*Client
	agent := loadCerts(t, p.agentFiles())
	// A projected ServiceAccount token with its pod and node claims is
	// 0.8 KB signed ES256 (test/telemetry_stream_test.go logs a real one)
	// to about 1 KB RS256 (most clusters): each stream's headers carry one.
	pad := ".." + strings.Repeat("x", 1000)
	for i := range n {
		node := fmt.Sprintf("node-%04d", i)
		c, err := NewClient(Config{Addr: os.Getenv("GPUD_SCALE_ADDR"), Node: node, Certs: agent, Token: staticToken(tokenFor(node) + pad), ServerName: "localhost",
			Hello: func() *telemetryv1.Hello { return &telemetryv1.Hello{Devices: devs} }, Samples: sample})
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	base := heapInUse()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, n)
	for _, c := range clients {
		go func() { _ = c.Run(ctx); done <- struct{}{} }()
	}
	deadline := time.Now().Add(120 * time.Second)
	for connected := 0; connected < n && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		connected = 0
		for _, c := range clients {
			if c.Connected() {
				connected++
			}
		}
	}
	time.Sleep(2 * time.Second)
	cpu0, wall0 := cpuSeconds(), time.Now()
	time.Sleep(scaleWindow)
	f := scaleFigures{CPUSeconds: cpuSeconds() - cpu0, WallSeconds: time.Since(wall0).Seconds(), HeapBytes: heapInUse() - base}
	for _, c := range clients {
		if c.Connected() {
			f.Connected++
		}
		f.SamplesDropped += testutil.ToFloat64(c.m.samplesDropped)
	}
	b, _ := json.Marshal(f)
	tmp := os.Getenv("GPUD_SCALE_OUT") + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, os.Getenv("GPUD_SCALE_OUT")); err != nil {
		t.Fatal(err)
	}
	// Keep streaming until the parent, done measuring, kills this process.
	time.Sleep(2 * time.Minute)
	cancel()
	for range clients {
		<-done
	}
}
