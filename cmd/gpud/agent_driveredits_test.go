package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/driveredits/driverroottest"
	"github.com/gpud/gpud/pkg/simnode"
)

// TestDriverEdits: the agent's CDI specs get the driver's files from a
// driver root that has them; a simulated node gets none (said at Info),
// and a driver root without them is said once at Warn, naming what is
// missing, and the agent goes on without.
func TestDriverEdits(t *testing.T) {
	node := simnode.NewBuiltin("dgx-h100")
	version, ret := node.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		t.Fatalf("SystemGetDriverVersion() = %v", ret)
	}
	tests := []struct {
		name      string
		sim       *simnode.Node
		root      string
		wantEdits bool
		wantLog   []string // substrings of the one record
	}{
		{name: "driver found", root: driverroottest.New(t, version), wantEdits: true,
			wantLog: []string{"level=INFO", "driver files in CDI specs", "nvidia_cdi_hook=/opt/nvidia-cdi-hook"}},
		{name: "simulated node", sim: node, root: driverroottest.New(t, version),
			wantLog: []string{"level=INFO", "driver files not in CDI specs", "simulated node"}},
		{name: "no libcuda", root: driverroottest.New(t, version, "libcuda.so"),
			wantLog: []string{"level=WARN", "nvidia RuntimeClass", "libcuda.so." + version}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			o := driverEditsOptions{hookPath: "/opt/nvidia-cdi-hook"}
			edits := newDriverEdits(o, node, tc.sim, tc.root, log)
			if got := len(edits.Mounts) > 0 && len(edits.Hooks) > 0; got != tc.wantEdits {
				t.Errorf("edits = %+v, want some: %v", edits, tc.wantEdits)
			}
			var records []string
			for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				if !strings.Contains(l, "level=DEBUG") {
					records = append(records, l)
				}
			}
			if len(records) != 1 {
				t.Fatalf("log = %q, want one record above Debug", records)
			}
			t.Logf("log: %s", records[0])
			for _, w := range tc.wantLog {
				if !strings.Contains(records[0], w) {
					t.Errorf("log %q lacks %q", records[0], w)
				}
			}
		})
	}
}

func TestDriverEditsFlagsValidate(t *testing.T) {
	tests := []struct {
		name string
		o    driverEditsOptions
		want int
	}{
		{name: "defaults", o: driverEditsOptions{hookPath: "/usr/bin/nvidia-cdi-hook"}},
		{name: "relative hook", o: driverEditsOptions{hookPath: "nvidia-cdi-hook"}, want: 1},
		{name: "relative host root", o: driverEditsOptions{hookPath: "/usr/bin/nvidia-cdi-hook", hostDriverRoot: "run/nvidia/driver"}, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if errs := tc.o.validate(); len(errs) != tc.want {
				t.Errorf("validate() = %v, want %d errors", errs, tc.want)
			}
		})
	}
}
