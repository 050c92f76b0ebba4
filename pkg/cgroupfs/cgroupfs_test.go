package cgroupfs

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name        string
		mountinfo   string
		wantUnified string
		wantV1      map[string]string
	}{
		{
			name: "hybrid",
			mountinfo: `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`,
			wantUnified: "/sys/fs/cgroup/unified",
			wantV1: map[string]string{"cpuset": "/sys/fs/cgroup/cpuset", "devices": "/sys/fs/cgroup/devices",
				"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct", "name=systemd": "/sys/fs/cgroup/systemd"},
		},
		{
			name:        "pure v2, a bind mount of a sub-cgroup ignored",
			mountinfo:   "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n90 29 0:26 /kubepods /mnt/x rw - cgroup2 cgroup2 rw\n",
			wantUnified: "/sys/fs/cgroup",
			wantV1:      map[string]string{},
		},
		{
			name:        "escaped space",
			mountinfo:   `29 23 0:26 / /mnt/my\040cg rw - cgroup2 cgroup2 rw` + "\n",
			wantUnified: "/mnt/my cg",
			wantV1:      map[string]string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Parse(strings.NewReader(tc.mountinfo))
			if err != nil {
				t.Fatal(err)
			}
			if m.Unified != tc.wantUnified {
				t.Errorf("Unified = %q, want %q", m.Unified, tc.wantUnified)
			}
			if len(m.V1) != len(tc.wantV1) {
				t.Errorf("V1 = %v, want %v", m.V1, tc.wantV1)
			}
			for k, v := range tc.wantV1 {
				if m.V1[k] != v {
					t.Errorf("V1[%s] = %q, want %q", k, m.V1[k], v)
				}
			}
		})
	}
}
