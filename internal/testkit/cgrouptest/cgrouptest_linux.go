package cgrouptest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/pkg/cgroupfs"
	"github.com/gpud/gpud/pkg/devcgroup"
)

// Unified skips the test unless it runs as root on a kernel with the
// device cgroup BPF support and a cgroup2 mount, and returns that mount.
func Unified(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates cgroups, mknods devices, loads BPF programs")
	}
	if err := devcgroup.Probe(); err != nil {
		t.Skipf("kernel: %v", err)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no mountinfo: %v", err)
	}
	mounts, err := cgroupfs.Parse(f)
	f.Close()
	if err != nil || mounts.Unified == "" {
		t.Skipf("no cgroup2 mount (%v)", err)
	}
	return mounts.Unified
}

// MkTree makes dir and removes it and everything below it (cgroups:
// children first) at cleanup.
func MkTree(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var dirs []string
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("remove test cgroup %s: %v", dirs[i], err)
			}
		}
	})
}

// GPUNodes makes n NVIDIA GPU character devices nvidia0..nvidia<n-1> in
// dir and returns their paths.
func GPUNodes(t *testing.T, dir string, n int) []string {
	t.Helper()
	var nodes []string
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("nvidia%d", i))
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(devcgroup.GPUMajor, uint32(i)))); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, p)
	}
	return nodes
}

// OpenIn opens each path read-only from a shell started inside the cgroup
// dir and returns "ok", "EPERM", "ENXIO" or the shell's message by base
// name.
func OpenIn(t *testing.T, dir string, paths []string) map[string]string {
	t.Helper()
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	script := `for p in "$@"; do if (exec 3<"$p") 2>/dev/null; then echo "$p ok"; else echo "$p $( (exec 3<"$p") 2>&1 )"; fi; done`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, paths...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("shell in %s: %v", dir, err)
	}
	got := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		p, res, _ := strings.Cut(line, " ")
		switch {
		case strings.Contains(res, "not permitted"):
			res = "EPERM"
		case strings.Contains(res, "No such device"):
			res = "ENXIO"
		}
		got[filepath.Base(p)] = res
	}
	return got
}
