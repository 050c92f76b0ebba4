package devcgroup

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpud/gpud/pkg/cgroupfs"
)

// v1Cgroup skips unless root with a cgroup v1 devices hierarchy, and
// returns a fresh devices cgroup removed at cleanup.
func v1Cgroup(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a devices cgroup and mknods devices")
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no mountinfo: %v", err)
	}
	defer f.Close()
	mounts, err := cgroupfs.Parse(f)
	if err != nil || mounts.V1["devices"] == "" {
		t.Skipf("no cgroup v1 devices hierarchy (%v)", err)
	}
	return testCgroup(t, mounts.V1["devices"])
}

// openInV1 runs the child, which joins the v1 cgroup dir first.
func openInV1(t *testing.T, dir string, nodes map[string]string) map[string]string {
	t.Helper()
	return openInChild(t, dir, nodes, nil, joinEnv+"="+dir)
}

func TestAttachV1Kernel(t *testing.T) {
	const capsMajor = 509
	tests := []struct {
		name  string
		setup []v1Write // the runtime's rules before gpud's
	}{
		{name: "allow all (privileged)"},
		{name: "runc exceptions", setup: []v1Write{{"devices.deny", "a"}, {"devices.allow", "c 1:3 rwm"},
			{"devices.allow", "c 195:0 rwm"}, {"devices.allow", "c 195:1 rwm"}, {"devices.allow", "c 195:2 rwm"}, {"devices.allow", "c 195:3 rwm"},
			{"devices.allow", "c 195:255 rwm"}, {"devices.allow", "c 509:12 r"}, {"devices.allow", "c 509:21 r"}}},
		{name: "whole major", setup: []v1Write{{"devices.deny", "a"}, {"devices.allow", "c 1:3 rwm"},
			{"devices.allow", "c 195:* rwm"}, {"devices.allow", "c 509:* rwm"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := v1Cgroup(t)
			for _, w := range tc.setup {
				if err := os.WriteFile(filepath.Join(dir, w.file), []byte(w.line), 0); err != nil {
					t.Fatalf("setup %s %q: %v", w.file, w.line, err)
				}
			}
			nodes := mknodAll(t, capsMajor)
			before := openInV1(t, dir, nodes)
			listBefore, _ := readV1List(dir)
			h, err := AttachV1(dir, Allowed{GPUMinors: []uint32{1, 3}, CapsMajor: capsMajor, CapMinors: []uint32{12}}, V1Node{GPUMinors: []uint32{0, 1, 2, 3, 4, 5, 6, 7}})
			if err != nil {
				t.Fatal(err)
			}
			got := openInV1(t, dir, nodes)
			t.Logf("attached: %v", got)
			for _, n := range []string{"nvidia1", "nvidia3", "nvidiactl", "cap12", "null"} {
				if got[n] != "ok" && !noDriver(got[n]) {
					t.Errorf("open %s = %s, want it through (ok, ENXIO or ENODEV)", n, got[n])
				}
			}
			for _, n := range []string{"nvidia0", "nvidia2", "nvidia7", "cap21"} {
				if got[n] != "EPERM" {
					t.Errorf("open %s = %s, want EPERM", n, got[n])
				}
			}
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			after := openInV1(t, dir, nodes)
			for n := range nodes {
				if after[n] != before[n] {
					t.Errorf("after Close open %s = %s, want %s as before", n, after[n], before[n])
				}
			}
			listAfter, _ := readV1List(dir)
			slices.Sort(listBefore)
			slices.Sort(listAfter)
			if !slices.Equal(listAfter, listBefore) {
				t.Errorf("devices.list after Close = %v, want %v", listAfter, listBefore)
			}
		})
	}
}

func TestUpdateV1Kernel(t *testing.T) {
	dir := v1Cgroup(t)
	// runc's exceptions for a container given GPUs 0, 1 and 2.
	for _, w := range []v1Write{{"devices.deny", "a"}, {"devices.allow", "c 195:0 rwm"}, {"devices.allow", "c 195:1 rwm"}, {"devices.allow", "c 195:2 rwm"}, {"devices.allow", "c 195:255 rwm"}} {
		if err := os.WriteFile(filepath.Join(dir, w.file), []byte(w.line), 0); err != nil {
			t.Fatal(err)
		}
	}
	nodes := mknodAll(t, 509)
	node := V1Node{GPUMinors: []uint32{0, 1, 2, 3}}
	h, err := AttachV1(dir, Allowed{GPUMinors: []uint32{1}}, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	if got := openInV1(t, dir, nodes); got["nvidia1"] == "EPERM" || got["nvidia2"] != "EPERM" {
		t.Fatalf("gpus=[1]: nvidia1 %s nvidia2 %s, want through and EPERM", got["nvidia1"], got["nvidia2"])
	}
	if err := h.Update(Allowed{GPUMinors: []uint32{2}}, node); err != nil {
		t.Fatal(err)
	}
	if got := openInV1(t, dir, nodes); got["nvidia0"] != "EPERM" || got["nvidia1"] != "EPERM" || got["nvidia2"] == "EPERM" {
		t.Fatalf("gpus=[2]: nvidia0 %s nvidia1 %s nvidia2 %s, want EPERM, EPERM and through", got["nvidia0"], got["nvidia1"], got["nvidia2"])
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	list, _ := readV1List(dir)
	slices.Sort(list)
	if want := []string{"c 195:0 rwm", "c 195:1 rwm", "c 195:2 rwm", "c 195:255 rwm"}; !slices.Equal(list, want) {
		t.Errorf("devices.list after Close = %v, want the runtime's %v", list, want)
	}
}
