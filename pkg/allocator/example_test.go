package allocator_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/gpud/gpud/pkg/allocator"
)

// Two 4-GPU nodes; a half-GPU pod is already on node a's GPU 0. gpud's
// policy puts the next half-GPU pod beside it on the same GPU (packing
// fractions), then places a 4-GPU pod on node b, which is still whole, and
// says why a second 4-GPU pod fits nowhere (both nodes refused it for
// GPUs).
func Example() {
	gpus := func() []allocator.GPU {
		out := make([]allocator.GPU, 4)
		for i := range out {
			out[i] = allocator.GPU{Model: "A100-SXM4-80GB", MemoryMiB: 81920, ComputeCapability: "8.0"}
		}
		return out
	}
	c, err := allocator.NewCluster([]allocator.Node{
		{Name: "a", CPUMilli: 64000, MemoryMiB: 512 << 10, GPUs: gpus()},
		{Name: "b", CPUMilli: 64000, MemoryMiB: 512 << 10, GPUs: gpus()},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	half := allocator.Request{CPUMilli: 4000, MemoryMiB: 16 << 10, NumGPU: 1, GPUMilli: 500}
	whole4 := allocator.Request{CPUMilli: 16000, MemoryMiB: 64 << 10, NumGPU: 4}
	policy, err := allocator.NewPolicy(allocator.PolicyGpud, c.Workload([]allocator.Request{half, whole4}))
	if err != nil {
		fmt.Println(err)
		return
	}
	a := allocator.New(c, policy, rand.New(rand.NewPCG(1, 2)))
	if err := c.Bind(allocator.Decision{Node: 0, GPUs: []int{0}, MilliPerGPU: 500}, half); err != nil {
		fmt.Println(err)
		return
	}
	for _, q := range []allocator.Request{half, whole4, whole4} {
		d, err := a.Place(q)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("node %s GPUs %v, %d milli-GPU each\n", c.Node(d.Node).Name, d.GPUs, d.MilliPerGPU)
	}
	fmt.Printf("allocated %d of %d milli-GPU\n", c.AllocatedGPUMilli(), c.GPUCapacityMilli())
	// Output:
	// node a GPUs [0], 500 milli-GPU each
	// node b GPUs [0 1 2 3], 1000 milli-GPU each
	// allocator: does not fit: gpu (map[gpu:2])
	// allocated 5000 of 8000 milli-GPU
}
