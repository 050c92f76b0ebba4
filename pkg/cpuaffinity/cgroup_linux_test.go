package cpuaffinity

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/cgroupfs"
)

// TestWriterRealCgroup creates a container-like cgroup in whichever
// hierarchy has cpuset here and sets its cpuset from a plan.
func TestWriterRealCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a cgroup")
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no mountinfo: %v", err)
	}
	mounts, err := cgroupfs.Parse(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(mounts.Unified, mounts.V1["cpuset"])
	if err != nil {
		t.Skipf("%v", err)
	}
	root := w.Hierarchy()
	parentCPUs, err := w.Get("/")
	if err != nil {
		t.Fatal(err)
	}
	rel := fmt.Sprintf("/gpud-cpuaffinity-test-%d", os.Getpid())
	dir := filepath.Join(root, rel)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove test cgroup %s: %v", dir, err)
		}
	})
	if w.unified == "" {
		// A v1 cpuset cgroup starts empty; the runtime fills it from the
		// parent, as here.
		for _, n := range []string{"cpuset.mems", "cpuset.cpus"} {
			b, err := os.ReadFile(filepath.Join(root, n))
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, dir, n, strings.TrimSpace(string(b)))
		}
	}
	want := parentCPUs[len(parentCPUs)-1:] // the last CPU, a strict subset when there are 2+
	if err := w.Set(rel, want); err != nil {
		t.Fatal(err)
	}
	got, err := w.Get(rel)
	if err != nil {
		t.Fatal(err)
	}
	if Format(got) != Format(want) {
		t.Errorf("cpuset.cpus = %s, want %s", Format(got), Format(want))
	}
	t.Logf("%s: cpuset.cpus %s -> %s", dir, Format(parentCPUs), Format(got))
	if err := w.Set(rel+"-gone", want); err == nil {
		t.Errorf("Set on a missing cgroup = nil, want an error")
		_ = os.Remove(dir + "-gone")
	}
}
