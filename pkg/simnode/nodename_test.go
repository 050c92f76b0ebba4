package simnode

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// uuidsOf is every GPU and MIG device UUID the node reports through NVML,
// sorted.
func uuidsOf(t *testing.T, n *Node) []string {
	t.Helper()
	count, _ := n.DeviceGetCount()
	var out []string
	for i := range count {
		d, _ := n.DeviceGetHandleByIndex(i)
		u, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			t.Fatalf("gpu %d GetUUID: %v", i, ret)
		}
		out = append(out, u)
		max, _ := d.GetMaxMigDeviceCount()
		for j := range max {
			h, ret := d.GetMigDeviceHandleByIndex(j)
			if ret != nvml.SUCCESS {
				continue
			}
			mu, ret := h.GetUUID()
			if ret != nvml.SUCCESS || !strings.HasPrefix(mu, "MIG-") {
				t.Fatalf("gpu %d MIG device %d UUID %q, %v", i, j, mu, ret)
			}
			out = append(out, mu)
		}
	}
	slices.Sort(out)
	return out
}

// withMIG gives GPU 0 two 1g MIG devices and GPU 1 one 7g, so a node has MIG
// UUIDs to compare.
func withMIG(t *testing.T, n *Node) {
	t.Helper()
	for _, tc := range []struct {
		gpu     int
		gi, ci  int
		howMany int
	}{
		{0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 2},
		{1, nvml.GPU_INSTANCE_PROFILE_7_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, 1},
	} {
		d := enableMIG(t, n, tc.gpu)
		for range tc.howMany {
			gi, ret := d.CreateGpuInstance(profile(t, d, tc.gi))
			if ret != nvml.SUCCESS {
				t.Fatalf("gpu %d CreateGpuInstance: %v", tc.gpu, ret)
			}
			ci, ret := gi.GetComputeInstanceProfileInfo(tc.ci, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
			if ret != nvml.SUCCESS {
				t.Fatalf("gpu %d GetComputeInstanceProfileInfo: %v", tc.gpu, ret)
			}
			if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
				t.Fatalf("gpu %d CreateComputeInstance: %v", tc.gpu, ret)
			}
		}
	}
}

// Two simulated nodes of one profile are two machines: the scheduler
// matches telemetry to devices by UUID, so their GPU and MIG UUIDs must not
// meet; and a restart of one node (its state file) keeps its UUIDs.
func TestNodeNameGivesDisjointStableUUIDs(t *testing.T) {
	dir := t.TempDir()
	start := func(name string) *Node {
		t.Helper()
		n, err := New(builtins["dgx-h100"], WithNodeName(name), WithStateFile(filepath.Join(dir, name+".json")))
		if err != nil {
			t.Fatalf("New node %s: %v", name, err)
		}
		t.Cleanup(n.Close)
		return n
	}
	a, b := start("node-a"), start("node-b")
	withMIG(t, a)
	withMIG(t, b)
	ua, ub := uuidsOf(t, a), uuidsOf(t, b)
	if len(ua) != 8+3 || len(ub) != 8+3 {
		t.Fatalf("got %d and %d UUIDs, want 8 GPUs + 3 MIG devices each", len(ua), len(ub))
	}
	for _, u := range ua {
		if slices.Contains(ub, u) {
			t.Errorf("node-a and node-b of one profile share UUID %s", u)
		}
	}
	if a.Name() != "node-a" || a.Profile().Name != "dgx-h100" {
		t.Errorf("Name() = %q, profile %q; want node-a, dgx-h100", a.Name(), a.Profile().Name)
	}

	// The default name is the profile's, distinct from both.
	for _, u := range uuidsOf(t, NewBuiltin("dgx-h100"))[:1] {
		if slices.Contains(ua, u) || slices.Contains(ub, u) {
			t.Errorf("the default-named node shares UUID %s with a named one", u)
		}
	}

	// A restart of node-a: same name and state file, same UUIDs, MIG ones
	// included (the layout comes back from the file).
	a.Close()
	again := start("node-a")
	if got := uuidsOf(t, again); !slices.Equal(got, ua) {
		t.Errorf("node-a after a restart has UUIDs\n%v\nwant\n%v", got, ua)
	}
	// The UUIDs the state file holds are the node's.
	var st nodeState
	data, err := os.ReadFile(filepath.Join(dir, "node-a.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	if st.Node != "node-a" || st.Profile != "dgx-h100" || len(st.GPUs) != 8 || !slices.Contains(ua, st.GPUs[3].UUID) {
		t.Errorf("state file node %q profile %q, gpu 3 %q; want node-a, dgx-h100 and one of node-a's UUIDs", st.Node, st.Profile, st.GPUs[3].UUID)
	}

	// node-b's state file is not node-a's.
	_, err = New(builtins["dgx-h100"], WithNodeName("node-a"), WithStateFile(filepath.Join(dir, "node-b.json")))
	if err == nil || !strings.Contains(err.Error(), `"node-b"`) {
		t.Errorf("node-a with node-b's state file = %v, want it refused naming node-b", err)
	}
}

// A node named after its profile keeps the UUIDs of gpud versions before
// node names counted (their state files and DRA checkpoints name them).
func TestDefaultNameKeepsUUIDs(t *testing.T) {
	n := NewBuiltin("dgx-h100")
	withMIG(t, n)
	named, err := New(builtins["dgx-h100"], WithNodeName("dgx-h100"))
	if err != nil {
		t.Fatal(err)
	}
	withMIG(t, named)
	got := uuidsOf(t, n)
	if !slices.Equal(got, uuidsOf(t, named)) {
		t.Errorf("WithNodeName(profile name) changed the UUIDs")
	}
	// The derivation of every version before: sha1 of the profile name
	// and the IDs, as fmt.Sprint joins them.
	if want := stableUUID("GPU", "dgx-h100", 0); !slices.Contains(got, want) {
		t.Errorf("GPU 0 of dgx-h100 is not %s", want)
	}
	if want := stableUUID("MIG", "dgx-h100", 1, 0, 0); !slices.Contains(got, want) {
		t.Errorf("GPU 1's 7g MIG device of dgx-h100 is not %s (UUIDs %v)", want, got)
	}
}

// A state file written before node names counted names the profile in
// "node" and has no "profile": it still loads, into a node of any name,
// which keeps the MIG layout and takes its own name's UUIDs.
func TestOldStateFileLoadsUnderANodeName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	old := NewBuiltin("dgx-h100", WithStateFile(path))
	withMIG(t, old)
	old.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	delete(st, "profile") // as versions before wrote it
	data, err = json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	n, err := New(builtins["dgx-h100"], WithNodeName("node-a"), WithStateFile(path))
	if err != nil {
		t.Fatalf("old state file under node-a: %v", err)
	}
	got := uuidsOf(t, n)
	if len(got) != 8+3 {
		t.Fatalf("got %d UUIDs, want the 3 MIG devices back: %v", len(got), got)
	}
	for _, u := range uuidsOf(t, old) {
		if slices.Contains(got, u) {
			t.Errorf("node-a kept the profile-named node's UUID %s", u)
		}
	}
}

func TestNodeNameMustBeANodeName(t *testing.T) {
	for _, name := range []string{"Node_A", "a\nb", "a,b"} {
		if _, err := New(builtins["dgx-h100"], WithNodeName(name)); !errors.Is(err, ErrBadProfile) || !strings.Contains(err.Error(), "not a Kubernetes node name") {
			t.Errorf("WithNodeName(%q) = %v, want ErrBadProfile: not a Kubernetes node name", name, err)
		}
	}
}
