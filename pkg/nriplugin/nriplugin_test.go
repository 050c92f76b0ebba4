package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"

	"github.com/gpud/gpud/internal/testkit/testbuf"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/cpuaffinity"
	"github.com/gpud/gpud/pkg/enforce"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/usage"
)

const podUID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"

type fakeAllocs struct{ as []usage.Assignment }

func (f fakeAllocs) List(context.Context) ([]usage.Assignment, error) { return f.as, nil }

type fakePods map[string]usage.PodRef

func (f fakePods) Pods() (map[string]usage.PodRef, error) { return f, nil }

type fakeContainers map[string]enforce.ContainerRef

func (f fakeContainers) Containers() (map[string]enforce.ContainerRef, error) { return f, nil }

// startRuntime starts NRI's own runtime-side adaptation on a socket in a
// temp dir, as containerd does, and the plugin against it.
func startRuntime(t *testing.T, hooks Hooks) *nri.Adaptation {
	t.Helper()
	dir, err := os.MkdirTemp("", "nri") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sync := func(ctx context.Context, cb nri.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		return err
	}
	update := func(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) { return nil, nil }
	r, err := nri.New("containerd-test", "v0", sync, update,
		nri.WithPluginPath(filepath.Join(dir, "plugins")), nri.WithPluginConfigPath(filepath.Join(dir, "conf.d")),
		nri.WithSocketPath(filepath.Join(dir, "nri.sock")))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	p := New(filepath.Join(dir, "nri.sock"), hooks, slog.New(slog.NewTextHandler(io.Discard, nil)))
	p.Retry = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

func testPod() *api.PodSandbox {
	return &api.PodSandbox{Id: "sandbox-1", Name: "train", Namespace: "ml", Uid: podUID,
		Linux: &api.LinuxPodSandbox{CgroupParent: "/kubepods/burstable/pod" + podUID}}
}

func testContainer(id, rel string, shares uint64) *api.Container {
	return &api.Container{Id: id, PodSandboxId: "sandbox-1", Name: "cuda",
		Linux: &api.LinuxContainer{CgroupsPath: rel, Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(shares)}}}}
}

// TestCPUSetAtCreateThroughNRI drives the plugin with NRI's runtime side:
// the container is created with a cpuset on its GPU's NUMA CPUs.
func TestCPUSetAtCreateThroughNRI(t *testing.T) {
	cg := t.TempDir()
	if err := os.WriteFile(filepath.Join(cg, "cgroup.controllers"), []byte("cpuset cpu memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := cpuaffinity.NewWriter(cg, "")
	if err != nil {
		t.Fatal(err)
	}
	inv := gpu.Inventory{GPUs: []gpu.GPU{{UUID: "GPU-near", Minor: 0, CPUAffinity: []int{8, 9, 10, 11}}, {UUID: "GPU-far", Minor: 1, CPUAffinity: []int{0, 1, 2, 3}}}}
	e, err := enforce.New(enforce.Config{CPUs: w, OnlineCPUs: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},
		Inventory:   func() gpu.Inventory { return inv },
		Allocations: fakeAllocs{as: []usage.Assignment{{Namespace: "ml", Pod: "train", Container: "cuda", DeviceIDs: []string{"GPU-near"}}}},
		Pods:        fakePods{}, Containers: fakeContainers{}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	r := startRuntime(t, e)
	ctx := t.Context()
	pod := testPod()
	if err := r.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	var resp *api.CreateContainerResponse
	testwait.ForErr(t, 10*time.Second, "the plugin to adjust the container's cpuset", func() error {
		var err error
		resp, err = r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: testContainer("c1", "/kubepods/burstable/pod"+podUID+"/c1", 2048)})
		if err != nil {
			return err
		}
		if got := resp.GetAdjust().GetLinux().GetResources().GetCpu().GetCpus(); got != "8-11" {
			return fmt.Errorf("cpuset adjustment %q, want 8-11", got)
		}
		return nil
	})
	// A request above the node's CPUs widens to all.
	resp, err = r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: testContainer("c2", "/kubepods/burstable/pod"+podUID+"/c2", 8*1024)})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetAdjust().GetLinux().GetResources().GetCpu().GetCpus(); got != "0-11" {
		t.Errorf("cpuset for 8 CPUs = %q, want 0-11", got)
	}
	// Guaranteed with 2 whole CPUs: the CPU manager's; no adjustment.
	gpod := testPod()
	gpod.Id, gpod.Linux.CgroupParent = "sandbox-2", "/kubepods/pod"+podUID
	if err := r.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: gpod}); err != nil {
		t.Fatal(err)
	}
	pinned := testContainer("c3", "/kubepods/pod"+podUID+"/c3", 2048)
	pinned.PodSandboxId = "sandbox-2"
	pinned.Linux.Resources.Cpu.Quota, pinned.Linux.Resources.Cpu.Period = api.Int64(200000), api.UInt64(100000)
	resp, err = r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: gpod, Container: pinned})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetAdjust().GetLinux().GetResources().GetCpu().GetCpus(); got != "" {
		t.Errorf("pinned container's cpuset adjusted to %q, want none", got)
	}
}

func TestContainerInfoRel(t *testing.T) {
	tests := []struct{ path, want string }{
		{"/kubepods/burstable/pod" + podUID + "/abc", "/kubepods/burstable/pod" + podUID + "/abc"},
		{"kubepods-burstable-pod0f1e2d3c_4b5a.slice:cri-containerd:abc", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e2d3c_4b5a.slice/cri-containerd-abc.scope"},
		{"kubepods-pod1.slice:crio:abc", "/kubepods.slice/kubepods-pod1.slice/crio-abc.scope"},
	}
	for _, tc := range tests {
		if got := (enforce.ContainerInfo{CgroupsPath: tc.path}).Rel(); got != tc.want {
			t.Errorf("Rel(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

func TestInfo(t *testing.T) {
	pod := &api.PodSandbox{Name: "p", Namespace: "n", Linux: &api.LinuxPodSandbox{CgroupParent: "/kubepods/pod" + podUID}}
	ctr := &api.Container{Name: "c", Linux: &api.LinuxContainer{CgroupsPath: "/kubepods/pod" + podUID + "/x",
		Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(4096), Quota: api.Int64(400000), Period: api.UInt64(100000)}}}}
	info := Info(pod, ctr)
	if !info.Guaranteed || info.CPURequestMilli != 4000 || info.CPUQuota != 400000 || info.CPUPeriod != 100000 {
		t.Errorf("Info = %+v, want guaranteed 4000m with quota 400000/100000", info)
	}
	if !strings.HasSuffix(info.Rel(), "/x") {
		t.Errorf("Rel = %q", info.Rel())
	}
	if info.AllDevices {
		t.Errorf("Info.AllDevices for a container without device rules")
	}
}

// TestInfoAllDevices: a privileged container's spec allows every device
// ("a *:* rwm", as containerd writes it); an ordinary one denies all and
// allows its own; a later wildcard deny closes an earlier allow.
func TestInfoAllDevices(t *testing.T) {
	allow := func(typ string) *api.LinuxDeviceCgroup {
		return &api.LinuxDeviceCgroup{Allow: true, Type: typ, Access: "rwm"}
	}
	deny := &api.LinuxDeviceCgroup{Allow: false, Access: "rwm"}
	gpu := &api.LinuxDeviceCgroup{Allow: true, Type: "c", Major: api.Int64(195), Minor: api.Int64(0), Access: "rw"}
	tests := []struct {
		name  string
		rules []*api.LinuxDeviceCgroup
		want  bool
	}{
		{"privileged (containerd)", []*api.LinuxDeviceCgroup{allow("")}, true},
		{"privileged (type a)", []*api.LinuxDeviceCgroup{allow("a")}, true},
		{"every char device", []*api.LinuxDeviceCgroup{deny, allow("c")}, true},
		{"ordinary: deny all, allow one GPU", []*api.LinuxDeviceCgroup{deny, gpu}, false},
		{"allow then deny", []*api.LinuxDeviceCgroup{allow(""), deny}, false},
		{"block devices only", []*api.LinuxDeviceCgroup{deny, allow("b")}, false},
		{"no rules", nil, false},
	}
	for _, tc := range tests {
		ctr := &api.Container{Name: "c", Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Devices: tc.rules}}}
		if got := Info(&api.PodSandbox{}, ctr).AllDevices; got != tc.want {
			t.Errorf("%s: AllDevices = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRunWithoutSocket: a node without NRI is not an error.
func TestRunWithoutSocket(t *testing.T) {
	p := New(filepath.Join(t.TempDir(), "missing.sock"), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	p.Retry = 10 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := p.Run(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want nil", err)
	}
}

// TestStaleSocketWarnsOnce: a socket no runtime answers (left by another
// runtime) is retried, and said once at Warn, not on every retry.
func TestStaleSocketWarnsOnce(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nri.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = ln.Close() // the file stays, nobody listens: connect gives ECONNREFUSED
	var buf testbuf.Buffer
	p := New(sock, nil, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	p.Retry = 5 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	testwait.For(t, 10*time.Second, "five retries of the stale socket", func() bool {
		return strings.Count(buf.String(), "nri socket still does not answer") >= 5
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d warnings for one stale socket, want 1:\n%s", n, buf.String())
	}
}
