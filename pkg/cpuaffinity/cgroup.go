package cpuaffinity

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ErrNoCpuset is returned (wrapped) by [NewWriter] when neither the cgroup
// v2 hierarchy has the cpuset controller nor a cgroup v1 cpuset hierarchy
// is mounted.
var ErrNoCpuset = errors.New("cpuaffinity: no cpuset controller")

// Writer writes container cpusets. Create one with [NewWriter].
type Writer struct {
	unified string // cgroup2 mount with cpuset enabled, or ""
	v1      string // cgroup v1 cpuset mount, or ""
}

// NewWriter picks the hierarchy that has cpuset: the cgroup2 mount
// unified when its cgroup.controllers lists cpuset, else the cgroup v1
// cpuset mount v1 (which must end in "/cpuset", as containerd/cgroups
// expects). Either may be empty.
func NewWriter(unified, v1 string) (*Writer, error) {
	if unified != "" {
		b, err := os.ReadFile(filepath.Join(unified, "cgroup.controllers"))
		if err == nil && hasWord(string(b), "cpuset") {
			return &Writer{unified: unified}, nil
		}
	}
	if v1 != "" {
		if filepath.Base(v1) != "cpuset" {
			return nil, fmt.Errorf("%w: cpuset v1 hierarchy at %s is co-mounted; mount it alone at <root>/cpuset", ErrNoCpuset, v1)
		}
		return &Writer{v1: v1}, nil
	}
	return nil, fmt.Errorf("%w: cgroup2 at %q lacks cpuset in cgroup.controllers and no cgroup v1 cpuset mount was found", ErrNoCpuset, unified)
}

// Hierarchy is the mount the writer writes under.
func (w *Writer) Hierarchy() string {
	if w.unified != "" {
		return w.unified
	}
	return w.v1
}

// Set writes cpus to the cpuset.cpus of the container cgroup at path (the
// cgroup's path inside the hierarchy, as /proc/<pid>/cgroup shows it,
// starting with "/").
func (w *Writer) Set(path string, cpus []int) error {
	list := Format(cpus)
	if w.unified != "" {
		m, err := cgroup2.Load(path, cgroup2.WithMountpoint(w.unified))
		if err != nil {
			return fmt.Errorf("cpuaffinity: load cgroup %s under %s: %w", path, w.unified, err)
		}
		if err := m.Update(&cgroup2.Resources{CPU: &cgroup2.CPU{Cpus: list}}); err != nil {
			return fmt.Errorf("cpuaffinity: set cpuset.cpus %s on %s: %w (is it within the parent's cpuset.cpus.effective?)", list, filepath.Join(w.unified, path), err)
		}
		return nil
	}
	if _, err := os.Stat(filepath.Join(w.v1, path)); err != nil {
		return fmt.Errorf("cpuaffinity: cgroup %s: %w", filepath.Join(w.v1, path), err)
	}
	root := filepath.Dir(w.v1)
	cg, err := cgroup1.Load(cgroup1.StaticPath(path), cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) {
		return []cgroup1.Subsystem{cgroup1.NewCpuset(root)}, nil
	}))
	if err != nil {
		return fmt.Errorf("cpuaffinity: load cgroup %s under %s: %w", path, w.v1, err)
	}
	if err := cg.Update(&specs.LinuxResources{CPU: &specs.LinuxCPU{Cpus: list}}); err != nil {
		return fmt.Errorf("cpuaffinity: set cpuset.cpus %s on %s: %w (is it within the parent's cpuset.cpus?)", list, filepath.Join(w.v1, path), err)
	}
	return nil
}

// Get reads the cpuset.cpus of the cgroup at path.
func (w *Writer) Get(path string) ([]int, error) {
	p := filepath.Join(w.Hierarchy(), path, "cpuset.cpus")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("cpuaffinity: read %s: %w", p, err)
	}
	return Parse(string(b))
}

func hasWord(s, w string) bool {
	for f := range strings.FieldsSeq(s) {
		if f == w {
			return true
		}
	}
	return false
}

// CPURequestMilli reads a container's CPU request back from its cgroup as
// the kubelet set it: cpu.weight on cgroup v2 (dir in the unified
// hierarchy) or cpu.shares on cgroup v1 (dir in the cpu hierarchy).
// Shares of 2 (the kubelet's minimum, no request) read as 0; cpu.weight
// keeps the request to within about 1%.
func CPURequestMilli(dir string) (int64, error) {
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.shares")); err == nil {
		shares, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cpuaffinity: %s/cpu.shares: %w", dir, err)
		}
		return sharesToMilli(shares), nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpu.weight"))
	if err != nil {
		return 0, fmt.Errorf("cpuaffinity: read the CPU request of %s (cpu.shares or cpu.weight): %w", dir, err)
	}
	weight, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cpuaffinity: %s/cpu.weight: %w", dir, err)
	}
	// runc: weight = 1 + (shares-2)*9999/262142; invert, rounding up.
	shares := 2 + ((weight-1)*262142+9998)/9999
	return sharesToMilli(shares), nil
}

// sharesToMilli inverts the kubelet's milliCPUToShares (shares =
// milli*1024/1000, at least 2).
func sharesToMilli(shares int64) int64 {
	if shares <= 2 {
		return 0
	}
	return shares * 1000 / 1024
}
