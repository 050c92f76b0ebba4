package devcgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/pkg/cgroupfs"
)

// childEnv makes the test binary, re-executed inside a test cgroup, open
// the device nodes listed in it (comma-separated) and print one
// "path errno" line per node ("ok" when the open succeeded).
const childEnv = "GPUD_DEVCGROUP_TEST_OPEN"

// joinEnv makes the child first move itself into this cgroup v1
// directory (cgroup v1 has no CLONE_INTO_CGROUP).
const joinEnv = "GPUD_DEVCGROUP_TEST_JOIN"

func TestMain(m *testing.M) {
	if paths := os.Getenv(childEnv); paths != "" {
		if dir := os.Getenv(joinEnv); dir != "" {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("0"), 0); err != nil {
				fmt.Fprintln(os.Stderr, "join:", err)
				os.Exit(2)
			}
		}
		for p := range strings.SplitSeq(paths, ",") {
			f, err := os.Open(p) // read-only: runc gives caps "r"
			switch {
			case err == nil:
				f.Close()
				fmt.Printf("%s ok\n", p)
			default:
				var errno syscall.Errno
				if !errors.As(err, &errno) {
					fmt.Printf("%s %v\n", p, err)
					continue
				}
				fmt.Printf("%s %s\n", p, unix.ErrnoName(errno))
			}
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// kernelCgroup skips unless this is root on a kernel that runs device
// programs, and returns a fresh cgroup v2 directory removed at cleanup.
func kernelCgroup(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a cgroup, mknods devices and loads a BPF program")
	}
	if err := Probe(); err != nil {
		t.Skipf("kernel: %v", err)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no mountinfo: %v", err)
	}
	defer f.Close()
	mounts, err := cgroupfs.Parse(f)
	if err != nil || mounts.Unified == "" {
		t.Skipf("no cgroup2 mount (%v)", err)
	}
	return testCgroup(t, mounts.Unified)
}

// testCgroup makes a cgroup for this test below hierarchy, removed at
// cleanup.
func testCgroup(t *testing.T, hierarchy string) string {
	t.Helper()
	dir := filepath.Join(hierarchy, fmt.Sprintf("gpud-devcgroup-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_")))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create test cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove test cgroup %s: %v", dir, err)
		}
	})
	return dir
}

// mknodAll creates 195:0..7, nvidiactl (195:255), a caps pair and
// /dev/null's 1:3 in a temp dir and returns their paths by name.
func mknodAll(t *testing.T, capsMajor uint32) map[string]string {
	t.Helper()
	dir := t.TempDir()
	nodes := map[string]string{}
	mk := func(name string, major, minor uint32) {
		p := filepath.Join(dir, name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
			t.Fatalf("mknod %s %d:%d: %v", p, major, minor, err)
		}
		nodes[name] = p
	}
	for i := range uint32(8) {
		mk("nvidia"+strconv.Itoa(int(i)), GPUMajor, i)
	}
	mk("nvidiactl", GPUMajor, CtlMinor)
	mk("cap12", capsMajor, 12)
	mk("cap21", capsMajor, 21)
	mk("null", 1, 3)
	return nodes
}

// openIn runs the test binary in cgroup dir and returns each node's open
// result ("ok", "ENXIO", "EPERM", ...).
func openIn(t *testing.T, dir string, nodes map[string]string) map[string]string {
	t.Helper()
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	return openInChild(t, dir, nodes, &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())})
}

// openInChild runs the test binary (with extra environment, in attr) to
// open each node and returns each node's open result by name.
func openInChild(t *testing.T, dir string, nodes map[string]string, attr *syscall.SysProcAttr, env ...string) map[string]string {
	t.Helper()
	var paths []string
	for _, p := range nodes {
		paths = append(paths, p)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+strings.Join(paths, ",")), env...)
	cmd.SysProcAttr = attr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child in %s: %v", dir, err)
	}
	byPath := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		p, res, _ := strings.Cut(line, " ")
		byPath[p] = res
	}
	got := map[string]string{}
	for name, p := range nodes {
		got[name] = byPath[p]
	}
	return got
}

// noDriver is what opening a NVIDIA node gives when the filter lets it
// through on a machine without the driver: no char device is registered.
func noDriver(res string) bool { return res == "ENXIO" || res == "ENODEV" }

func TestAttachKernel(t *testing.T) {
	const capsMajor = 509 // unregistered here, like the other majors
	tests := []struct {
		name    string
		allowed Allowed
		pass    []string // open reaches the (missing) driver or succeeds
		refused []string // EPERM
	}{
		{
			name:    "gpus 1 and 3 and one cap",
			allowed: Allowed{GPUMinors: []uint32{1, 3}, CapsMajor: capsMajor, CapMinors: []uint32{12}},
			pass:    []string{"nvidia1", "nvidia3", "nvidiactl", "cap12", "null"},
			refused: []string{"nvidia0", "nvidia2", "nvidia4", "nvidia5", "nvidia6", "nvidia7", "cap21"},
		},
		{
			name:    "no gpus",
			allowed: Allowed{CapsMajor: capsMajor},
			pass:    []string{"nvidiactl", "null"},
			refused: []string{"nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidia4", "nvidia5", "nvidia6", "nvidia7", "cap12", "cap21"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := kernelCgroup(t)
			nodes := mknodAll(t, capsMajor)
			before := openIn(t, dir, nodes)
			for name, res := range before {
				if res == "EPERM" {
					t.Fatalf("before attach %s = EPERM; the test cgroup is already filtered", name)
				}
			}
			h, err := Attach(dir, tc.allowed)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.Close() })
			got := openIn(t, dir, nodes)
			t.Logf("attached %s: %v", tc.allowed, got)
			for _, n := range tc.pass {
				if got[n] != "ok" && !noDriver(got[n]) {
					t.Errorf("open %s = %s, want it through the filter (ok, ENXIO or ENODEV)", n, got[n])
				}
			}
			for _, n := range tc.refused {
				if got[n] != "EPERM" {
					t.Errorf("open %s = %s, want EPERM", n, got[n])
				}
			}
			if err := h.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			after := openIn(t, dir, nodes)
			for _, n := range tc.refused {
				if after[n] == "EPERM" {
					t.Errorf("after Close open %s = EPERM, want the filter gone", n)
				}
			}
		})
	}
}

func TestUpdateKernel(t *testing.T) {
	dir := kernelCgroup(t)
	nodes := mknodAll(t, 509)
	h, err := Attach(dir, Allowed{GPUMinors: []uint32{1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	if got := openIn(t, dir, nodes); got["nvidia1"] == "EPERM" || got["nvidia2"] != "EPERM" {
		t.Fatalf("gpus=[1]: nvidia1 %s nvidia2 %s, want through and EPERM", got["nvidia1"], got["nvidia2"])
	}
	if err := h.Update(Allowed{GPUMinors: []uint32{2}}); err != nil {
		t.Fatal(err)
	}
	if got := openIn(t, dir, nodes); got["nvidia1"] != "EPERM" || got["nvidia2"] == "EPERM" {
		t.Fatalf("gpus=[2]: nvidia1 %s nvidia2 %s, want EPERM and through", got["nvidia1"], got["nvidia2"])
	}
}

// TestComposesWithRuntimeProgram attaches a stand-in for the runtime's
// program (allowing every GPU) first, then gpud's narrower one: a device
// opens only when both allow it.
func TestComposesWithRuntimeProgram(t *testing.T) {
	dir := kernelCgroup(t)
	nodes := mknodAll(t, 509)
	runtime, err := Attach(dir, Allowed{GPUMinors: []uint32{0, 1, 2, 3, 4, 5, 6, 7}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = runtime.Close() })
	h, err := Attach(dir, Allowed{GPUMinors: []uint32{3}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	got := openIn(t, dir, nodes)
	if got["nvidia3"] == "EPERM" || got["nvidia0"] != "EPERM" {
		t.Errorf("nvidia3 %s nvidia0 %s, want through and EPERM (the narrower rule wins)", got["nvidia3"], got["nvidia0"])
	}
}
