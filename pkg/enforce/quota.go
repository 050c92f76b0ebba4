package enforce

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// integerLimit reports whether the cgroup at dir has a CPU limit of a
// whole number of CPUs (cpu.max on cgroup v2, cpu.cfs_quota_us and
// cpu.cfs_period_us on v1): with Guaranteed QoS, what the kubelet's static
// CPU manager pins.
func integerLimit(dir string) bool {
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.max")); err == nil {
		f := strings.Fields(string(b))
		if len(f) != 2 || f[0] == "max" {
			return false
		}
		return wholeMultiple(f[0], f[1])
	}
	q, err1 := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	p, err2 := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err1 != nil || err2 != nil {
		return false
	}
	return wholeMultiple(strings.TrimSpace(string(q)), strings.TrimSpace(string(p)))
}

func wholeMultiple(quota, period string) bool {
	q, err1 := strconv.ParseInt(quota, 10, 64)
	p, err2 := strconv.ParseInt(period, 10, 64)
	return err1 == nil && err2 == nil && q > 0 && p > 0 && q%p == 0
}
