package nodeenv

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupMount is where the cgroup file systems are mounted.
const cgroupMount = "/sys/fs/cgroup"

// cgroupHierarchies are the directories of every cgroup hierarchy: just
// /sys/fs/cgroup on a cgroup v2 host, /sys/fs/cgroup/<controller> (and
// unified, systemd) on a v1 or hybrid one.
func cgroupHierarchies() []string {
	if _, err := os.Stat(filepath.Join(cgroupMount, "cgroup.procs")); err == nil {
		return []string{cgroupMount}
	}
	entries, _ := os.ReadDir(cgroupMount)
	var out []string
	for _, e := range entries {
		d := filepath.Join(cgroupMount, e.Name())
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil && e.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// makeCgroupRoot creates the kubelet's cgroup root in every hierarchy
// (the kubelet refuses a cgroupRoot that does not exist), and root/shims
// for containerd's shims (ShimCgroup) so that killCgroup finds them too,
// with v1 cpuset's CPUs and memory nodes copied from the parent so tasks
// can join them.
func makeCgroupRoot(root string) error {
	for _, h := range cgroupHierarchies() {
		for _, rel := range []string{root, root + "/shims"} {
			d := filepath.Join(h, rel)
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("nodeenv: cgroup root: %w", err)
			}
			if filepath.Base(h) != "cpuset" {
				continue
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
				if err == nil {
					err = os.WriteFile(filepath.Join(d, f), v, 0o644)
				}
				if err != nil {
					return fmt.Errorf("nodeenv: cgroup root: %w", err)
				}
			}
		}
	}
	return nil
}

// cgroupRootPrefix starts every node's cgroup root; the test binary's pid
// follows, so sweepStaleCgroupRoots can tell the roots of dead runs.
const cgroupRootPrefix = "gpud-nodeenv-"

// sweepStaleCgroupRoots kills what is left in, and removes, the cgroup
// roots of test binaries that are gone (a run killed by -timeout or a
// signal runs no cleanup: its containers and shims live on there).
func sweepStaleCgroupRoots() {
	hs := cgroupHierarchies()
	if len(hs) == 0 {
		return
	}
	entries, _ := os.ReadDir(hs[0])
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), cgroupRootPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil {
			continue
		}
		if _, err := os.Stat("/proc/" + pidStr); err == nil && pid != os.Getpid() {
			continue // its test binary is alive
		}
		if pid == os.Getpid() {
			continue
		}
		root := "/" + e.Name()
		killCgroup(root)
		_ = removeCgroupRoot(root)
	}
}

// cgroupDirs are root's directories in every hierarchy, deepest first.
func cgroupDirs(root string) []string {
	var dirs []string
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return dirs
}

// killCgroup kills every process in root's cgroups (the node's
// containers, which outlive their shims in pid namespaces of their own).
func killCgroup(root string) {
	for range 20 {
		found := false
		for _, d := range cgroupDirs(root) {
			b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					found = true
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if !found {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroupRoot removes root's cgroups, deepest first, retrying while
// the kernel still counts exiting tasks in them.
func removeCgroupRoot(root string) error {
	var err error
	for range 50 {
		err = nil
		for _, d := range cgroupDirs(root) {
			if e := syscall.Rmdir(d); e != nil && !errors.Is(e, syscall.ENOENT) {
				err = fmt.Errorf("remove cgroup %s: %w", d, e)
			}
		}
		if err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// insecureTransport is for the loopback health checks of components that
// serve with self-signed certificates.
func insecureTransport() *http.Transport {
	return &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // loopback health check
}
