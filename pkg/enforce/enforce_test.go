package enforce

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/devcgroup"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/usage"
)

const (
	uidA = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	uidB = "11111111-2222-3333-4444-555555555555"
)

func cid(c byte) string { return strings.Repeat(string(c), 64) }

func TestParseLogName(t *testing.T) {
	tests := []struct {
		name   string
		wantID string
		want   ContainerRef
		ok     bool
	}{
		{"train-0_ml_cuda-" + cid('a') + ".log", cid('a'), ContainerRef{"ml", "train-0", "cuda"}, true},
		{"p_ns_side-car-" + cid('b') + ".log", cid('b'), ContainerRef{"ns", "p", "side-car"}, true},
		{"p_ns_c-" + cid('b') + ".txt", "", ContainerRef{}, false},
		{"p_ns_c-abc.log", "", ContainerRef{}, false},
		{"p_c-" + cid('b') + ".log", "", ContainerRef{}, false},
	}
	for _, tc := range tests {
		id, ref, ok := parseLogName(tc.name)
		if ok != tc.ok || id != tc.wantID || ref != tc.want {
			t.Errorf("parseLogName(%q) = %q %+v %v, want %q %+v %v", tc.name, id, ref, ok, tc.wantID, tc.want, tc.ok)
		}
	}
}

func TestScan(t *testing.T) {
	root := t.TempDir()
	dirs := []string{
		"kubepods/burstable/pod" + uidA + "/" + cid('a'),
		"kubepods/burstable/pod" + uidA + "/" + cid('b'),
		"kubepods/pod" + uidB + "/" + cid('c'),
		"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + strings.ReplaceAll(uidB, "-", "_") + ".slice/cri-containerd-" + cid('d') + ".scope",
		"system.slice/containerd.service",
		"kubepods/burstable/pod" + uidA + "/not-a-container",
		// A kubelet with cgroupRoot /kubelet.
		"kubelet/kubepods/besteffort/pod" + uidB + "/" + cid('e'),
		// Deeper than a cgroupRoot one level down: not a kubepods tree.
		"a/b/kubepods/pod" + uidB + "/" + cid('f'),
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := scan(root)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]container{
		"/" + dirs[0]: {rel: "/" + dirs[0], podUID: uidA, containerID: cid('a')},
		"/" + dirs[1]: {rel: "/" + dirs[1], podUID: uidA, containerID: cid('b')},
		"/" + dirs[2]: {rel: "/" + dirs[2], podUID: uidB, containerID: cid('c'), guaranteed: true},
		"/" + dirs[3]: {rel: "/" + dirs[3], podUID: uidB, containerID: cid('d')},
		"/" + dirs[6]: {rel: "/" + dirs[6], podUID: uidB, containerID: cid('e')},
	}
	if len(got) != len(want) {
		t.Fatalf("scan = %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("scan[%s] = %+v, want %+v", k, got[k], w)
		}
	}
	if none, err := scan(filepath.Join(root, "missing")); err != nil || len(none) != 0 {
		t.Errorf("scan(missing) = %v, %v; want none", none, err)
	}
}

func TestAllowedFor(t *testing.T) {
	inv := gpu.Inventory{GPUs: []gpu.GPU{
		{Index: 0, UUID: "GPU-0", Minor: 0},
		{Index: 1, UUID: "GPU-1", Minor: 1, MIGDevices: []gpu.MIGDevice{{UUID: "MIG-1a", GPUInstanceID: 1, ComputeInstanceID: 0}}},
		{Index: 2, UUID: "GPU-5", Minor: 5},
	}}
	majors := devcgroup.Majors{UVM: 510, Caps: 508}
	tests := []struct {
		name     string
		ids      []string
		wantGPUs []uint32
		wantCaps []uint32
	}{
		{name: "none"},
		{name: "whole gpu", ids: []string{"GPU-5"}, wantGPUs: []uint32{5}},
		{name: "replica", ids: []string{"GPU-0::3", "GPU-0::4"}, wantGPUs: []uint32{0}},
		{name: "mig slice", ids: []string{"MIG-1a"}, wantGPUs: []uint32{1}, wantCaps: []uint32{devcgroup.CapMinor(1, 1, -1), devcgroup.CapMinor(1, 1, 0)}},
		{name: "another plugin's device", ids: []string{"mlx5_0"}},
		{name: "index id strategy", ids: []string{"2"}, wantGPUs: []uint32{5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := allowedFor(inv, majors, tc.ids)
			if !slices.Equal(a.GPUMinors, tc.wantGPUs) || !slices.Equal(a.CapMinors, tc.wantCaps) || a.CapsMajor != 508 || a.UVMMajor != 510 {
				t.Errorf("allowedFor(%v) = %+v, want gpus %v caps %v", tc.ids, a, tc.wantGPUs, tc.wantCaps)
			}
		})
	}
}

func TestDeviceIDs(t *testing.T) {
	as := []usage.Assignment{
		{Namespace: "ml", Pod: "p", Container: "a", ResourceName: "nvidia.com/gpu", DeviceIDs: []string{"GPU-1", "2"}},
		{Namespace: "ml", Pod: "p", Container: "a", ResourceName: "rdma/hca", DeviceIDs: []string{"0"}},
		{Namespace: "ml", Pod: "p", Container: "b", ResourceName: "nvidia.com/mig-1g.10gb", DeviceIDs: []string{"MIG-x"}},
		{Namespace: "ml", Pod: "q", Container: "a", ResourceName: "nvidia.com/gpu", DeviceIDs: []string{"GPU-9"}},
	}
	if got := deviceIDs(as, "ml", "p", "a"); !slices.Equal(got, []string{"GPU-1", "2"}) {
		t.Errorf("container a = %v, want GPU-1 and index 2 (not rdma's 0)", got)
	}
	if got := deviceIDs(as, "ml", "p", ""); !slices.Equal(got, []string{"GPU-1", "2", "MIG-x"}) {
		t.Errorf("pod p = %v, want its containers' GPUs", got)
	}
}

func TestIntegerLimit(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  bool
	}{
		{"v2 4 cpus", map[string]string{"cpu.max": "400000 100000\n"}, true},
		{"v2 1.5 cpus", map[string]string{"cpu.max": "150000 100000\n"}, false},
		{"v2 unlimited", map[string]string{"cpu.max": "max 100000\n"}, false},
		{"v1 2 cpus", map[string]string{"cpu.cfs_quota_us": "200000", "cpu.cfs_period_us": "100000"}, true},
		{"v1 unlimited", map[string]string{"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"}, false},
		{"none", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for n, v := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, n), []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := integerLimit(dir); got != tc.want {
				t.Errorf("integerLimit = %v, want %v", got, tc.want)
			}
		})
	}
}

// Fakes of the kubelet's views.
type fakeAllocs struct{ as []usage.Assignment }

func (f *fakeAllocs) List(context.Context) ([]usage.Assignment, error) { return f.as, nil }

type fakePods map[string]usage.PodRef

func (f fakePods) Pods() (map[string]usage.PodRef, error) { return f, nil }

type fakeContainers map[string]ContainerRef

func (f fakeContainers) Containers() (map[string]ContainerRef, error) { return f, nil }

func dgxH100(t *testing.T) gpu.Inventory {
	t.Helper()
	inv, err := discovery.New(simnode.NewBuiltin("dgx-h100"), "dgx-h100", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	return inv
}
