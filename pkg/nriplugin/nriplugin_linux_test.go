package nriplugin

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/pkg/cgroupfs"
	"github.com/gpud/gpud/pkg/devcgroup"
	"github.com/gpud/gpud/pkg/enforce"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/usage"
)

// openInCgroup opens each path read-only from a shell inside the cgroup.
func openInCgroup(t *testing.T, dir string, paths []string) map[string]string {
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

// TestFilterAtStartThroughNRI: NRI's runtime side starts a container
// whose cgroup exists (as runc create leaves it); the plugin has attached
// the device filter when StartContainer returns, before any poll.
func TestFilterAtStartThroughNRI(t *testing.T) {
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
	root := filepath.Join(mounts.Unified, fmt.Sprintf("gpud-nri-test-%d", os.Getpid()))
	rel := "/kubepods/burstable/pod" + podUID + "/" + strings.Repeat("c", 64)
	dirs := []string{root}
	parts := strings.Split(strings.Trim(rel, "/"), "/")
	for i := range parts {
		dirs = append(dirs, filepath.Join(root, filepath.Join(parts[:i+1]...)))
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
				t.Errorf("remove test cgroup %s: %v", dirs[i], err)
			}
		}
	})
	devs := t.TempDir()
	var nodes []string
	for i := range 4 {
		p := filepath.Join(devs, fmt.Sprintf("nvidia%d", i))
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(devcgroup.GPUMajor, uint32(i)))); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, p)
	}
	inv := gpu.Inventory{GPUs: []gpu.GPU{{UUID: "GPU-0", Minor: 0}, {UUID: "GPU-1", Minor: 1}, {UUID: "GPU-2", Minor: 2}, {UUID: "GPU-3", Minor: 3}}}
	e, err := enforce.New(enforce.Config{Unified: root, Isolate: true,
		Inventory: func() gpu.Inventory { return inv },
		Allocations: fakeAllocs{as: []usage.Assignment{
			{Namespace: "ml", Pod: "train", Container: "cuda", DeviceIDs: []string{"GPU-2"}},
			{Namespace: "ml", Pod: "train", Container: "sidecar", DeviceIDs: []string{"GPU-3"}},
		}},
		// The kubelet's log link of the container is missing: only NRI names it.
		Pods: fakePods{podUID: {Namespace: "ml", Name: "train", UID: podUID}}, Containers: fakeContainers{}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	// No e.Run: only NRI events act here.
	t.Cleanup(func() { e.ContainerRemoved(enforce.ContainerInfo{CgroupsPath: rel}) })
	r := startRuntime(t, e)
	ctx := t.Context()
	pod := testPod()
	if err := r.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	ctr := testContainer("c1", rel, 2)
	var got map[string]string
	for range 200 { // the plugin registers asynchronously
		if err := r.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: ctr}); err != nil {
			t.Fatal(err)
		}
		if got = openInCgroup(t, filepath.Join(root, rel), nodes); got["nvidia0"] == "EPERM" {
			break
		}
	}
	t.Logf("after StartContainer: %v", got)
	want := map[string]string{"nvidia0": "EPERM", "nvidia1": "EPERM", "nvidia2": "ENXIO", "nvidia3": "EPERM"}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("open %s = %s, want %s", n, got[n], w)
		}
	}
	// The poll keeps the exact rule NRI gave, not the pod's union (which
	// would add the sidecar's GPU 3).
	e.Reconcile(ctx)
	if got := openInCgroup(t, filepath.Join(root, rel), nodes); got["nvidia2"] != "ENXIO" || got["nvidia3"] != "EPERM" {
		t.Errorf("after a poll: nvidia2 %s nvidia3 %s, want ENXIO and EPERM", got["nvidia2"], got["nvidia3"])
	}
	if err := r.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: ctr}); err != nil {
		t.Fatal(err)
	}
	if got := openInCgroup(t, filepath.Join(root, rel), nodes); got["nvidia0"] == "EPERM" {
		t.Errorf("after RemoveContainer: nvidia0 = EPERM, want the filter released")
	}
}
