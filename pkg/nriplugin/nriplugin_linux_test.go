package nriplugin

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpud/gpud/internal/testkit/cgrouptest"
	"github.com/gpud/gpud/pkg/enforce"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/usage"
)

// TestFilterAtStartThroughNRI: NRI's runtime side starts a container
// whose cgroup exists (as runc create leaves it); the plugin has attached
// the device filter when StartContainer returns, before any poll.
func TestFilterAtStartThroughNRI(t *testing.T) {
	unified := cgrouptest.Unified(t)
	root := filepath.Join(unified, fmt.Sprintf("gpud-nri-test-%d", os.Getpid()))
	rel := "/kubepods/burstable/pod" + podUID + "/" + strings.Repeat("c", 64)
	cgrouptest.MkTree(t, root)
	d := root
	for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
		d = filepath.Join(d, part)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	devs := t.TempDir()
	nodes := cgrouptest.GPUNodes(t, devs, 4)
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
		if got = cgrouptest.OpenIn(t, filepath.Join(root, rel), nodes); got["nvidia0"] == "EPERM" {
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
	if got := cgrouptest.OpenIn(t, filepath.Join(root, rel), nodes); got["nvidia2"] != "ENXIO" || got["nvidia3"] != "EPERM" {
		t.Errorf("after a poll: nvidia2 %s nvidia3 %s, want ENXIO and EPERM", got["nvidia2"], got["nvidia3"])
	}
	if err := r.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: ctr}); err != nil {
		t.Fatal(err)
	}
	if got := cgrouptest.OpenIn(t, filepath.Join(root, rel), nodes); got["nvidia0"] == "EPERM" {
		t.Errorf("after RemoveContainer: nvidia0 = EPERM, want the filter released")
	}
}
