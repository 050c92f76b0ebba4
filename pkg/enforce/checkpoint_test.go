package enforce

import (
	"path/filepath"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/pkg/dra"
)

// TestCheckpointClaims: the enforcer's view of the driver's prepared
// claims is read from a checkpoint pkg/dra's Preparer wrote.
func TestCheckpointClaims(t *testing.T) {
	dir := t.TempDir()
	if got, err := CheckpointClaims(filepath.Join(dir, "none"))(); err != nil || len(got) != 0 {
		t.Fatalf("no checkpoint: %v, %v; want none", got, err)
	}
	p, err := dra.NewPreparer(dra.PreparerConfig{NodeName: "node-a", StateDir: dir, CDIDir: t.TempDir(),
		Devices: func() map[string]dra.DeviceRef {
			return map[string]dra.DeviceRef{"gpu-0": {Name: "gpu-0", Type: dra.TypeGPU, GPUUUID: "GPU-0", MemoryBytes: 80 << 30}}
		}})
	if err != nil {
		t.Fatal(err)
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-gpu", UID: "u1"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{}
	claim.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: dra.DriverName, Pool: "node-a", Device: "gpu-0"}}
	res, err := p.Prepare(t.Context(), []*resourceapi.ResourceClaim{claim})
	if err != nil || res["u1"].Err != nil {
		t.Fatalf("Prepare() = %v, %v", res, err)
	}
	got, err := CheckpointClaims(dir)()
	if err != nil || !slices.Equal(got, []ClaimRef{{Namespace: "ml", Name: "train-gpu"}}) {
		t.Errorf("CheckpointClaims() = %v, %v; want ml/train-gpu", got, err)
	}
}
