package simnode

import (
	"testing"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestMIGProfileCapacity creates as many instances of each profile as the
// real GPU allows on an empty GPU, then checks one more fails.
func TestMIGProfileCapacity(t *testing.T) {
	tests := []struct {
		node string
		want map[string]int // profile name -> instances that fit on an empty GPU
	}{
		{node: "dgx-a100", want: map[string]int{"1g.5gb": 7, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1, "1g.10gb": 4, "1g.5gb+me": 1}},
		{node: "dgx-h100", want: map[string]int{"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1, "1g.10gb+me": 1}},
		{node: "dgx-h200", want: map[string]int{"1g.18gb": 7, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1, "1g.18gb+me": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.node, func(t *testing.T) {
			n := NewBuiltin(tc.node)
			d := enableMIG(t, n, 0)
			total, _ := d.GetMemoryInfo()
			devlib := device.New(n)
			seen := map[string]bool{}
			for idx := range nvml.GPU_INSTANCE_PROFILE_COUNT {
				info, ret := d.GetGpuInstanceProfileInfo(idx)
				if ret == nvml.ERROR_NOT_SUPPORTED {
					continue
				}
				if ret != nvml.SUCCESS {
					t.Fatalf("profile %d: %v", idx, ret)
				}
				p, err := devlib.NewMigProfile(idx, ciProfileFor[info.SliceCount], nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, info.MemorySizeMB, total.Total)
				if err != nil {
					t.Fatalf("profile %d name: %v", idx, err)
				}
				name := p.GetInfo().String()
				want, ok := tc.want[name]
				if !ok {
					t.Fatalf("unexpected profile %s", name)
				}
				seen[name] = true
				if int(info.InstanceCount) != want {
					t.Errorf("%s InstanceCount %d, want %d", name, info.InstanceCount, want)
				}
				if rem, _ := d.GetGpuInstanceRemainingCapacity(&info); rem != want {
					t.Errorf("%s remaining capacity on an empty GPU %d, want %d", name, rem, want)
				}
				var gis []nvml.GpuInstance
				for i := range want {
					gi, ret := d.CreateGpuInstance(&info)
					if ret != nvml.SUCCESS {
						t.Fatalf("%s instance %d: %v", name, i+1, ret)
					}
					gis = append(gis, gi)
				}
				if _, ret := d.CreateGpuInstance(&info); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
					t.Errorf("%s instance %d = %v, want ERROR_INSUFFICIENT_RESOURCES", name, want+1, ret)
				}
				for _, gi := range gis {
					if ret := gi.Destroy(); ret != nvml.SUCCESS {
						t.Fatal(ret)
					}
				}
			}
			for name := range tc.want {
				if !seen[name] {
					t.Errorf("profile %s missing", name)
				}
			}
		})
	}
}

// ciProfileFor is the compute-instance profile that fills a GPU instance.
var ciProfileFor = map[uint32]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
}
