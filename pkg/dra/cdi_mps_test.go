package dra

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// TestPrepareFractionMountsMPSPipe: with an MPS root, a fraction's CDI
// device mounts its GPU's MPS pipe directory at /tmp/nvidia-mps and points
// CUDA_MPS_PIPE_DIRECTORY there, beside its limits; a whole GPU gets none
// of it. The spec passes the CDI library's validation (readSpec).
func TestPrepareFractionMountsMPSPipe(t *testing.T) {
	e := newPrepEnv(t, "dgx-h100", nil)
	root := filepath.Join(t.TempDir(), "mps")
	p, err := NewPreparer(PreparerConfig{NodeName: e.name, StateDir: e.stateDir, CDIDir: e.cdiDir, Devices: e.tab.devices, MPSRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	gpu0 := e.tab.devices()["gpu-0"].GPUUUID
	frac := claim("a", "a", alloc{pool: e.name, device: "gpu-0", shareID: "s-a",
		capacity: map[resourceapi.QualifiedName]string{"memory": "20Gi", "cores": "25"}})
	if _, err := prepareOne(t, p, frac); err != nil {
		t.Fatal(err)
	}
	edits := readSpec(t, e.cdiDir, "a").GetDevice("a-gpu-0-s-a").ContainerEdits
	want := []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"}
	if !slices.Equal(edits.Env, want) {
		t.Errorf("env = %v, want %v", edits.Env, want)
	}
	pipe, shm := filepath.Join(root, gpu0, "pipe"), filepath.Join(root, "shm")
	if len(edits.Mounts) != 2 || edits.Mounts[0].HostPath != pipe || edits.Mounts[0].ContainerPath != "/tmp/nvidia-mps" ||
		!slices.Contains(edits.Mounts[0].Options, "rbind") || !slices.Contains(edits.Mounts[0].Options, "rw") ||
		edits.Mounts[1].HostPath != shm || edits.Mounts[1].ContainerPath != "/dev/shm" {
		t.Errorf("mounts = %+v, want %s bound read-write at /tmp/nvidia-mps and %s at /dev/shm", edits.Mounts, pipe, shm)
	}
	for _, d := range []string{pipe, shm} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("%s not created at prepare (a bind mount of a missing one fails the container): %v", d, err)
		}
	}

	if _, err := prepareOne(t, p, claim("w", "w", alloc{pool: e.name, device: "gpu-1"})); err != nil {
		t.Fatal(err)
	}
	if whole := readSpec(t, e.cdiDir, "w").GetDevice("w-gpu-1").ContainerEdits; len(whole.Mounts) != 0 || len(whole.Env) != 0 {
		t.Errorf("whole GPU edits = %+v, want no MPS", whole)
	}
}

// TestPrepareFractionBadMPSRoot: an MPS root that cannot hold the pipe
// directory fails the claim's prepare, naming the directory.
func TestPrepareFractionBadMPSRoot(t *testing.T) {
	e := newPrepEnv(t, "dgx-h100", nil)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := NewPreparer(PreparerConfig{NodeName: e.name, StateDir: e.stateDir, CDIDir: e.cdiDir, Devices: e.tab.devices, MPSRoot: file})
	if err != nil {
		t.Fatal(err)
	}
	_, err = prepareOne(t, p, claim("a", "a", alloc{pool: e.name, device: "gpu-0", shareID: "s-a",
		capacity: map[resourceapi.QualifiedName]string{"memory": "20Gi"}}))
	if err == nil || !strings.Contains(err.Error(), "MPS directory "+file) {
		t.Errorf("prepare under a file as MPS root = %v, want an error naming the directory", err)
	}
}
