package main

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"testing"

	"github.com/gpud/gpud/pkg/gpu"
)

// `gpud agent --simulate dgx-h100 --node-name a` and `... --node-name b`
// are two machines: the scheduler matches telemetry to devices by UUID, so
// their GPUs share none. $NODE_NAME (the DaemonSet's) names the node as the
// flag does, and the same name gives the same UUIDs on every start.
func TestSimulatedUUIDsFollowNodeName(t *testing.T) {
	uuids := func(args ...string) []string {
		t.Helper()
		var out bytes.Buffer
		if err := run(t.Context(), append([]string{"inventory", "--simulate", "dgx-h100", "-o", "json"}, args...), &out, io.Discard); err != nil {
			t.Fatalf("gpud inventory %v: %v", args, err)
		}
		var inv gpu.Inventory
		if err := json.Unmarshal(out.Bytes(), &inv); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, g := range inv.GPUs {
			ids = append(ids, g.UUID)
		}
		if len(ids) != 8 {
			t.Fatalf("gpud inventory %v: %d GPUs, want 8", args, len(ids))
		}
		return ids
	}
	a, b := uuids("--node-name", "node-a"), uuids("--node-name", "node-b")
	for _, u := range a {
		if slices.Contains(b, u) {
			t.Errorf("node-a and node-b share GPU UUID %s", u)
		}
	}
	if again := uuids("--node-name", "node-a"); !slices.Equal(again, a) {
		t.Errorf("node-a's UUIDs changed between runs: %v, then %v", a, again)
	}
	t.Setenv("NODE_NAME", "node-b")
	if env := uuids(); !slices.Equal(env, b) {
		t.Errorf("NODE_NAME=node-b gives UUIDs %v, --node-name node-b %v", env, b)
	}
}
