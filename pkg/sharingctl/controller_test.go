package sharingctl

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpud/gpud/internal/testkit/testbuf"
	"github.com/gpud/gpud/pkg/memwatch"
	"github.com/gpud/gpud/pkg/timeslice"
)

// TestReloadAppliesFileOrKeepsCurrent: a changed --sharing-config reaches
// the runtime; a file invalid for this node is refused, logged, and the
// config in force stays.
func TestReloadAppliesFileOrKeepsCurrent(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sharing.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rt := timeslice.NewRuntime(timeslice.RuntimeConfig{Inventory: sharingInventory, Allocations: fakeAllocations{}})
	logs := &testbuf.Buffer{}
	c, err := New(Config{Runtime: rt, Inventory: sharingInventory, File: file, Metrics: prometheus.NewRegistry(),
		Log: slog.New(slog.NewTextHandler(logs, nil)), Watchdog: idleWatchdog()})
	if err != nil {
		t.Fatal(err)
	}
	write("devices:\n  GPU-a:\n    replicas: 4\n")
	c.Reload(t.Context())
	if got := rt.Sharing().Devices["GPU-a"].Replicas; got != 4 {
		t.Fatalf("after reload: GPU-a replicas %d, want 4", got)
	}
	write("devices:\n  GPU-zzz:\n    replicas: 2\n")
	c.Reload(t.Context())
	if got := rt.Sharing().Devices["GPU-a"].Replicas; got != 4 {
		t.Errorf("an invalid file changed the config: GPU-a replicas %d, want 4 kept", got)
	}
	if !strings.Contains(logs.String(), "sharing config invalid") || !strings.Contains(logs.String(), "GPU-zzz") {
		t.Errorf("the refusal was not logged with the key:\n%s", logs.String())
	}
}

// TestNewRegistersMetrics: the watchdog's metrics are on the registry
// from the start, and a second controller on the same registry is an
// error, not a panic.
func TestNewRegistersMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	rt := timeslice.NewRuntime(timeslice.RuntimeConfig{Inventory: sharingInventory})
	cfg := Config{Runtime: rt, Inventory: sharingInventory, Metrics: reg, Watchdog: idleWatchdog()}
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "gpud_sharing_memory_over_limit_total", "gpud_sharing_memory_kills_total", "gpud_sharing_memory_over_limit"); err != nil || n != 3 {
		t.Errorf("gathered %d sharing metrics (%v), want 3", n, err)
	}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "register metrics") {
		t.Errorf("second New on one registry = %v, want a register error", err)
	}
	if _, err := New(Config{Inventory: sharingInventory, Metrics: reg}); err == nil {
		t.Error("New without a Runtime accepted")
	}
}

// idleWatchdog is a watchdog config whose sources see no process.
func idleWatchdog() memwatch.WatchdogConfig {
	return memwatch.WatchdogConfig{Mode: memwatch.EnforceReport, Processes: noSources{}, Containers: noSources{}, Assignments: noSources{}}
}

// noSources answers every watchdog source with nothing.
type noSources struct{}

func (noSources) GPUProcesses(context.Context) ([]memwatch.GPUProcess, error) { return nil, nil }
func (noSources) Lookup(uint32) (memwatch.ContainerRef, error) {
	return memwatch.ContainerRef{}, errors.New("no such process")
}
func (noSources) List(context.Context) ([]memwatch.Assignment, error) { return nil, nil }
