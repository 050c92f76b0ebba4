// Package cgroupfs finds the cgroup hierarchies a node mounted, from
// /proc/self/mountinfo: the cgroup v2 (unified) mount, wherever it is
// (/sys/fs/cgroup on a pure v2 host, /sys/fs/cgroup/unified on a hybrid
// one), and each cgroup v1 controller's mount. It reads only the reader it
// is given; cmd/gpud opens the file.
package cgroupfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrNoCgroup2 is returned (wrapped) by [Mounts.Unified] users when the
// node mounted no cgroup v2 hierarchy.
var ErrNoCgroup2 = errors.New("cgroupfs: no cgroup2 mount")

// Mounts are the cgroup hierarchies of one mount namespace.
type Mounts struct {
	// Unified is the cgroup2 mount point; empty when there is none.
	Unified string
	// V1 maps each cgroup v1 controller ("cpuset", "devices", and
	// "name=systemd" for named hierarchies) to its mount point.
	V1 map[string]string
}

// Parse reads mountinfo lines (proc(5)): "id parent maj:min root mountpoint
// options [optional...] - fstype source superoptions". Only mounts whose
// root is "/" count (a bind mount of a sub-cgroup is not the hierarchy).
func Parse(r io.Reader) (Mounts, error) {
	m := Mounts{V1: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f := strings.Fields(pre)
		g := strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || f[3] != "/" {
			continue
		}
		mnt := unescape(f[4])
		switch g[0] {
		case "cgroup2":
			if m.Unified == "" {
				m.Unified = mnt
			}
		case "cgroup":
			for opt := range strings.SplitSeq(g[2], ",") {
				switch opt {
				case "rw", "ro", "":
					continue
				}
				if _, seen := m.V1[opt]; !seen && isController(opt) {
					m.V1[opt] = mnt
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Mounts{}, fmt.Errorf("cgroupfs: read mountinfo: %w", err)
	}
	return m, nil
}

// isController leaves out v1 mount options that are not controllers.
func isController(opt string) bool {
	if strings.HasPrefix(opt, "name=") {
		return true
	}
	switch opt {
	case "relatime", "noatime", "nosuid", "nodev", "noexec", "xattr", "clone_children", "noprefix", "cpuset_v2_mode":
		return false
	}
	return !strings.Contains(opt, "=")
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) && isOctal(s[i+1:i+4]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '7' {
			return false
		}
	}
	return true
}
