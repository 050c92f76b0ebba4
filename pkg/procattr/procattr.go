// Package procattr attributes a host process to the Kubernetes container it
// runs in: pid -> /proc/<pid>/cgroup -> pod UID and container ID. It reads
// files under an injected proc root only, so it runs against a temp dir in
// tests. It understands cgroup v1 and v2, the cgroupfs and systemd cgroup
// drivers, and the containerd, CRI-O and Docker path styles.
package procattr

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3"

	"github.com/gpud/gpud/pkg/usage"
)

// DefaultProcRoot is the host's proc mount.
const DefaultProcRoot = "/proc"

// ErrNotContainer is returned (wrapped) by [Resolver.Lookup] for a process
// whose cgroup is not a Kubernetes pod's container (a host process, or a
// process in a private cgroup namespace that hides the path).
var ErrNotContainer = errors.New("procattr: process is not in a pod container")

// Container identifies where a process runs (see [usage.Container]).
type Container = usage.Container

// Resolver looks processes up under ProcRoot (empty means
// [DefaultProcRoot]). The zero value reads /proc; it is safe for concurrent
// use.
type Resolver struct {
	ProcRoot string
}

// Lookup returns the container of pid. A process that exited gives an error
// wrapping fs.ErrNotExist; one outside any pod gives [ErrNotContainer].
func (r Resolver) Lookup(pid uint32) (Container, error) {
	root := r.ProcRoot
	if root == "" {
		root = DefaultProcRoot
	}
	path := filepath.Join(root, strconv.FormatUint(uint64(pid), 10), "cgroup")
	f, err := os.Open(path)
	if err != nil {
		return Container{}, fmt.Errorf("procattr: pid %d: %w", pid, err)
	}
	defer f.Close()
	legacy, unified, err := cgroups.ParseCgroupFromReaderUnified(f)
	if err != nil {
		return Container{}, fmt.Errorf("procattr: pid %d: parse %s: %w", pid, path, err)
	}
	// cgroup v2 has only the unified path; on v1 the memory and devices
	// hierarchies are always there for pods, then whatever else is.
	candidates := []string{unified, legacy["memory"], legacy["devices"], legacy["pids"], legacy["cpu"], legacy["name=systemd"]}
	for _, p := range candidates {
		if c, ok := ParsePath(p); ok {
			return c, nil
		}
	}
	for _, p := range legacy {
		if c, ok := ParsePath(p); ok {
			return c, nil
		}
	}
	return Container{}, fmt.Errorf("%w: pid %d", ErrNotContainer, pid)
}

// ParsePath extracts the pod UID and container ID from one cgroup path, in
// any of these styles:
//
//	/kubepods/burstable/pod<uid>/<id>                                     (cgroupfs, containerd)
//	/kubepods/pod<uid>/crio-<id>                                          (cgroupfs, CRI-O)
//	/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<u_i_d>.slice/cri-containerd-<id>.scope
//	/kubepods.slice/kubepods-pod<u_i_d>.slice/crio-<id>.scope             (systemd)
//
// It reports false when the path holds no pod and container.
func ParsePath(p string) (Container, bool) {
	if p == "" || p == "/" {
		return Container{}, false
	}
	segs := strings.Split(strings.Trim(p, "/"), "/")
	for i, s := range segs {
		uid, ok := podUID(s)
		if !ok {
			continue
		}
		for _, next := range segs[i+1:] {
			if id, ok := containerID(next); ok {
				return Container{PodUID: uid, ContainerID: id}, true
			}
		}
		return Container{}, false
	}
	return Container{}, false
}

// podUID reads "pod<uid>" (cgroupfs) or "kubepods[-qos]-pod<u_i_d>.slice"
// (systemd, dashes escaped as underscores).
func podUID(seg string) (string, bool) {
	var raw string
	switch {
	case strings.HasPrefix(seg, "pod"):
		raw = seg[len("pod"):]
	case strings.HasPrefix(seg, "kubepods") && strings.HasSuffix(seg, ".slice"):
		i := strings.LastIndex(seg, "-pod")
		if i < 0 {
			return "", false
		}
		raw = strings.ReplaceAll(strings.TrimSuffix(seg[i+len("-pod"):], ".slice"), "_", "-")
	default:
		return "", false
	}
	if !isUID(raw) {
		return "", false
	}
	return raw, true
}

// containerID reads "<id>", "<runtime>-<id>" or "<runtime>-<id>.scope";
// CRI-O's conmon scopes are not the container.
func containerID(seg string) (string, bool) {
	seg = strings.TrimSuffix(seg, ".scope")
	if strings.Contains(seg, "conmon") {
		return "", false
	}
	if i := strings.LastIndexByte(seg, '-'); i >= 0 {
		seg = seg[i+1:]
	}
	if len(seg) != 64 || !isHex(seg) {
		return "", false
	}
	return seg, true
}

// isUID reports whether s looks like a pod UID (8-4-4-4-12 hex).
func isUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !isHexRune(c) {
				return false
			}
		}
	}
	return true
}

func isHex(s string) bool {
	for _, c := range s {
		if !isHexRune(c) {
			return false
		}
	}
	return true
}

func isHexRune(c rune) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}
