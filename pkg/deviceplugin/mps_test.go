package deviceplugin

import (
	"github.com/gpud/gpud/pkg/devnodes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpud/gpud/pkg/timeslice"
)

// mpsSets shares GPU-0000 in 4 replicas with memory limits and keeps the
// other GPUs whole.
func mpsSets(t *testing.T) map[string]*deviceSet {
	t.Helper()
	cfg := testConfig()
	cfg.Sharing = timeslice.Config{Devices: map[string]timeslice.Sharing{"GPU-0000": {Replicas: 4, LimitMemory: true}}}
	sets := build(synthInventory(2, 0), cfg).sets
	if sets["nvidia.com/gpu.shared"] == nil || sets["nvidia.com/gpu"] == nil {
		t.Fatalf("sets = %v, want gpu and gpu.shared", sets)
	}
	return sets
}

func TestAllocateMountsMPSPipe(t *testing.T) {
	sets := mpsSets(t)
	root := t.TempDir()
	req := func(ids ...string) *pluginapi.AllocateRequest {
		return &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}
	}
	resp, err := allocate(sets["nvidia.com/gpu.shared"], ListCDI, root, req("GPU-0000::0", "GPU-0000::1"))
	if err != nil {
		t.Fatal(err)
	}
	r := resp.ContainerResponses[0]
	pipe := filepath.Join(root, "GPU-0000", "pipe")
	shm := filepath.Join(root, "shm")
	if len(r.Mounts) != 2 || r.Mounts[0].HostPath != pipe || r.Mounts[0].ContainerPath != "/tmp/nvidia-mps" || r.Mounts[0].ReadOnly ||
		r.Mounts[1].HostPath != shm || r.Mounts[1].ContainerPath != "/dev/shm" || r.Mounts[1].ReadOnly {
		t.Errorf("mounts = %v, want %s at /tmp/nvidia-mps and %s at /dev/shm, read-write", r.Mounts, pipe, shm)
	}
	// Two replicas: 2 x 25% of the SMs and 2 x 20 GiB.
	want := map[string]string{
		"CUDA_MPS_PIPE_DIRECTORY":           "/tmp/nvidia-mps",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=40960M",
	}
	for k, v := range want {
		if r.Envs[k] != v {
			t.Errorf("env %s = %q, want %q (all: %v)", k, r.Envs[k], v, r.Envs)
		}
	}
	for _, d := range []string{pipe, shm} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("%s was not created before the daemon: %v", d, err)
		}
	}

	// A whole GPU gets no MPS edits; nor does a replica without an MPS root.
	resp, err = allocate(sets["nvidia.com/gpu"], ListCDI, root, req("GPU-0001"))
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.ContainerResponses[0]; len(r.Mounts) != 0 || r.Envs["CUDA_MPS_PIPE_DIRECTORY"] != "" {
		t.Errorf("whole GPU: mounts %v env %v, want no MPS", r.Mounts, r.Envs)
	}
	resp, err = allocate(sets["nvidia.com/gpu.shared"], ListCDI, "", req("GPU-0000::2"))
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.ContainerResponses[0]; len(r.Mounts) != 0 || r.Envs["CUDA_MPS_PIPE_DIRECTORY"] != "" || r.Envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "25" {
		t.Errorf("no MPS root: mounts %v env %v, want limits only", r.Mounts, r.Envs)
	}

	// An MPS root that cannot hold the directory fails the allocation,
	// naming the directory, instead of failing the container later.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := allocate(sets["nvidia.com/gpu.shared"], ListCDI, file, req("GPU-0000::3")); err == nil {
		t.Error("allocate under an MPS root that is a file succeeded")
	}
}

func TestCDISpecMPSEdits(t *testing.T) {
	sets := mpsSets(t)
	spec := buildCDISpec(sets, "/run/gpud/mps", devnodes.Files{}, cdispec.ContainerEdits{})
	byName := map[string]cdispec.ContainerEdits{}
	for _, d := range spec.Devices {
		byName[d.Name] = d.ContainerEdits
	}
	shared := byName["GPU-0000"]
	if len(shared.Mounts) != 2 || shared.Mounts[0].HostPath != "/run/gpud/mps/GPU-0000/pipe" || shared.Mounts[0].ContainerPath != "/tmp/nvidia-mps" ||
		shared.Mounts[1].HostPath != "/run/gpud/mps/shm" || shared.Mounts[1].ContainerPath != "/dev/shm" {
		t.Errorf("shared GPU mounts = %+v, want its pipe dir at /tmp/nvidia-mps and the daemons' shm at /dev/shm", shared.Mounts)
	}
	if !slices.Contains(shared.Mounts[0].Options, "rbind") || !slices.Contains(shared.Env, "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps") {
		t.Errorf("shared GPU edits = %+v, want a bind mount and CUDA_MPS_PIPE_DIRECTORY", shared)
	}
	if whole := byName["GPU-0001"]; len(whole.Mounts) != 0 || len(whole.Env) != 0 {
		t.Errorf("whole GPU edits = %+v, want no MPS", whole)
	}
	// The spec passes the CDI library's validation when written.
	if err := writeCDISpec(t.TempDir(), spec); err != nil {
		t.Fatal(err)
	}
	if spec := buildCDISpec(sets, "", devnodes.Files{}, cdispec.ContainerEdits{}); len(spec.Devices[0].ContainerEdits.Mounts)+len(spec.Devices[1].ContainerEdits.Mounts) != 0 {
		t.Errorf("no MPS root: spec has mounts")
	}
}

func TestValidateMPSRoot(t *testing.T) {
	cfg := testConfig()
	cfg.MPSRoot = "relative/mps"
	if err := cfg.Validate(); err == nil {
		t.Error("a relative MPS root passed Validate")
	}
}

// TestAllocateMPSLimitIsShareLimit: a share that may borrow above its
// request (memoryLimitMiB) gets its limit as MPS's pinned memory limit, a
// hard one; replicas of two shares add up their limits.
func TestAllocateMPSLimitIsShareLimit(t *testing.T) {
	cfg := testConfig()
	cfg.Sharing = timeslice.Config{Devices: map[string]timeslice.Sharing{"GPU-0000": {Shares: []timeslice.Share{
		{MemoryMiB: 10240, MemoryLimitMiB: 20480}, {MemoryMiB: 10240}, {MemoryMiB: 10240}}}}}
	set := build(synthInventory(2, 0), cfg).sets["nvidia.com/gpu.shared"]
	if set == nil {
		t.Fatal("no gpu.shared set")
	}
	for _, tc := range []struct {
		ids  []string
		want string
	}{
		{ids: []string{"GPU-0000::0"}, want: "0=20480M"},
		{ids: []string{"GPU-0000::1"}, want: "0=10240M"},
		{ids: []string{"GPU-0000::0", "GPU-0000::1"}, want: "0=30720M"},
	} {
		resp, err := allocate(set, ListCDI, "", &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: tc.ids}}})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.ContainerResponses[0].Envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]; got != tc.want {
			t.Errorf("%v: MPS memory limit %q, want %q", tc.ids, got, tc.want)
		}
	}
}
