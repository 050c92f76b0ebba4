package enforce

import (
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/pkg/dra"
)

// TestCheckpointClaims: the enforcer's view of the driver's prepared
// claims is read from a checkpoint pkg/dra's Preparer wrote: a whole GPU
// has no fractions, a quarter of a GPU's memory is one with its share ID
// and its memory request.
func TestCheckpointClaims(t *testing.T) {
	dir := t.TempDir()
	if got, err := CheckpointClaims(filepath.Join(dir, "none"))(); err != nil || len(got) != 0 {
		t.Fatalf("no checkpoint: %v, %v; want none", got, err)
	}
	p, err := dra.NewPreparer(dra.PreparerConfig{NodeName: "node-a", StateDir: dir, CDIDir: t.TempDir(),
		Devices: func() map[string]dra.DeviceRef {
			return map[string]dra.DeviceRef{
				"gpu-0": {Name: "gpu-0", Type: dra.TypeGPU, GPUUUID: "GPU-0", MemoryBytes: 80 << 30},
				"gpu-1": {Name: "gpu-1", Type: dra.TypeGPU, GPUUUID: "GPU-1", MemoryBytes: 80 << 30, Shareable: true},
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-gpu", UID: "u1"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{}
	claim.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: dra.DriverName, Pool: "node-a", Device: "gpu-0"}}
	share := types.UID("0b5e")
	frac := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "infer-gpu", UID: "u2"}}
	frac.Status.Allocation = &resourceapi.AllocationResult{}
	frac.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: dra.DriverName, Pool: "node-a", Device: "gpu-1",
		ShareID: &share, ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{dra.CapacityMemory: resource.MustParse("20Gi")}}}
	res, err := p.Prepare(t.Context(), []*resourceapi.ResourceClaim{claim, frac})
	if err != nil || res[types.UID("u1")].Err != nil || res[types.UID("u2")].Err != nil {
		t.Fatalf("Prepare() = %v, %v", res, err)
	}
	got, err := CheckpointClaims(dir)()
	sort.Slice(got, func(i, j int) bool { return got[i].Name < got[j].Name })
	want := []ClaimRef{
		{Namespace: "ml", Name: "infer-gpu", Fractions: []ClaimFraction{{Device: "gpu-1", ShareID: "0b5e", MemoryBytes: 20 << 30}}},
		{Namespace: "ml", Name: "train-gpu"},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("CheckpointClaims() = %+v, %v; want %+v", got, err, want)
	}
}
