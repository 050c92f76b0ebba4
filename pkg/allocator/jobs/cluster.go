package jobs

import (
	"fmt"

	"github.com/gpud/gpud/pkg/allocator"
)

// gpuSpec is the fixed description of one GPU.
type gpuSpec struct {
	model   int
	memMiB  int64
	mig     bool
	healthy bool
}

// gpuFree is the free state of one GPU.
type gpuFree struct {
	milli      int64 // free milli-GPU (non-MIG GPUs)
	mem        int64 // free GPU memory MiB (non-MIG GPUs)
	migUsed    uint8 // memory slices taken (MIG GPUs)
	migCompute int   // compute slices taken (MIG GPUs)
}

type nodeInfo struct {
	name     string
	cpu, mem int64
	gpus     []gpuSpec
	group    [4]int // group index per Level; LevelNone is always 0
}

type nodeFree struct {
	cpu, mem  int64
	gpus      []gpuFree
	wholeFree int   // healthy non-MIG GPUs fully free
	milliFree int64 // sum of free milli over healthy non-MIG GPUs
	pods      int   // pods bound on the node
}

// cluster is the free state of all nodes.
type cluster struct {
	info     []nodeInfo
	free     []nodeFree
	models   []string
	modelIDs map[string]int
	groups   [4][][]int // Level -> group -> node indices
	names    [4][]string
	byName   map[string]int
	capacity Resources
	obj      *objState // nil: today's placement score
}

func newCluster(nodes []allocator.Node) (*cluster, error) {
	c := &cluster{modelIDs: map[string]int{}, byName: map[string]int{}}
	groupIDs := [4]map[string]int{{}, {}, {}, {}}
	c.groups[LevelNone] = [][]int{nil}
	c.names[LevelNone] = []string{"cluster"}
	for i, n := range nodes {
		if n.CPUMilli < 0 || n.MemoryMiB < 0 {
			return nil, fmt.Errorf("node %q: negative capacity: %w", n.Name, ErrInvalid)
		}
		if _, dup := c.byName[n.Name]; dup {
			return nil, fmt.Errorf("node %q listed twice: %w", n.Name, ErrInvalid)
		}
		c.byName[n.Name] = i
		inf := nodeInfo{name: n.Name, cpu: n.CPUMilli, mem: n.MemoryMiB, gpus: make([]gpuSpec, len(n.GPUs))}
		fr := nodeFree{cpu: n.CPUMilli, mem: n.MemoryMiB, gpus: make([]gpuFree, len(n.GPUs))}
		for g, gpu := range n.GPUs {
			id, ok := c.modelIDs[gpu.Model]
			if !ok {
				if len(c.models) >= 63 {
					return nil, fmt.Errorf("node %q: more than 63 GPU models: %w", n.Name, ErrInvalid)
				}
				id = len(c.models)
				c.models = append(c.models, gpu.Model)
				c.modelIDs[gpu.Model] = id
			}
			s := gpuSpec{model: id, memMiB: gpu.MemoryMiB, mig: gpu.Labels[LabelMIG] == "true", healthy: !gpu.Unhealthy}
			inf.gpus[g] = s
			if !s.mig {
				// Free even if unhealthy, so [Scheduler.SetGPUHealth] can
				// bring it back; the counters skip unhealthy GPUs.
				fr.gpus[g] = gpuFree{milli: allocator.MilliPerGPU, mem: s.memMiB}
			}
			if !s.healthy {
				continue
			}
			if s.mig {
				c.capacity.MIGSlices += MIGSlicesPerGPU
			} else {
				fr.wholeFree++
				fr.milliFree += allocator.MilliPerGPU
				c.capacity.GPUMilli += allocator.MilliPerGPU
			}
			c.capacity.GPUMemoryMiB += s.memMiB
		}
		c.capacity.CPUMilli += n.CPUMilli
		c.capacity.MemoryMiB += n.MemoryMiB
		nvl := n.Labels[LabelNVLinkDomain]
		if nvl == "" {
			nvl = "node/" + n.Name
		}
		for lv, key := range map[Level]string{LevelNVLink: nvl, LevelRack: n.Labels[LabelRack], LevelZone: n.Labels[LabelZone]} {
			id, ok := groupIDs[lv][key]
			if !ok {
				id = len(c.groups[lv])
				groupIDs[lv][key] = id
				c.groups[lv] = append(c.groups[lv], nil)
				c.names[lv] = append(c.names[lv], key)
			}
			inf.group[lv] = id
			c.groups[lv][id] = append(c.groups[lv][id], i)
		}
		c.groups[LevelNone][0] = append(c.groups[LevelNone][0], i)
		c.info = append(c.info, inf)
		c.free = append(c.free, fr)
	}
	return c, nil
}

// modelSet is a bit set of model ids; 0 means any model.
type modelSet uint64

const constrained modelSet = 1 << 63

func (m modelSet) has(id int) bool { return m == 0 || m&(1<<id) != 0 }

func (c *cluster) modelSet(models []string) modelSet {
	if len(models) == 0 {
		return 0
	}
	m := constrained
	for _, name := range models {
		if id, ok := c.modelIDs[name]; ok {
			m |= 1 << id
		}
	}
	return m
}

// kind is the GPU form of a demand.
type kind uint8

const (
	kindCPU kind = iota
	kindWhole
	kindFrac
	kindMIG
)

// demand is a normalized [Pod].
type demand struct {
	cpu, mem int64
	kind     kind
	num      int
	milli    int64 // per GPU
	gmem     int64 // explicit GPU memory for a fraction; 0 = proportional
	mig      *MIGProfile
	models   modelSet
}

func (c *cluster) demand(p Pod) (demand, error) {
	d := demand{cpu: p.CPUMilli, mem: p.MemoryMiB, models: c.modelSet(p.Models)}
	if d.cpu < 0 || d.mem < 0 || p.NumGPU < 0 || p.GPUMilli < 0 || p.GPUMemoryMiB < 0 {
		return d, fmt.Errorf("negative request: %w", ErrInvalid)
	}
	switch {
	case p.MIG != "":
		i, err := migIndex(p.MIG)
		if err != nil {
			return d, err
		}
		d.kind, d.num, d.mig = kindMIG, 1, &MIGProfiles[i]
	case p.NumGPU == 0 && p.GPUMilli == 0 && p.GPUMemoryMiB == 0:
		d.kind = kindCPU
	case (p.GPUMilli > 0 && p.GPUMilli < allocator.MilliPerGPU) || (p.GPUMilli == 0 && p.GPUMemoryMiB > 0):
		if p.NumGPU > 1 {
			return d, fmt.Errorf("%d GPUs of %d milli: only single-GPU pods may share: %w", p.NumGPU, p.GPUMilli, ErrInvalid)
		}
		d.kind, d.num, d.milli, d.gmem = kindFrac, 1, p.GPUMilli, p.GPUMemoryMiB
	case p.GPUMilli > allocator.MilliPerGPU:
		return d, fmt.Errorf("gpu_milli %d above 1000: %w", p.GPUMilli, ErrInvalid)
	default:
		d.kind, d.num, d.milli = kindWhole, max(p.NumGPU, 1), allocator.MilliPerGPU
	}
	return d, nil
}

// fracMem is the GPU memory a fraction takes on a GPU of memMiB.
func (d *demand) fracMem(memMiB int64) int64 {
	if d.gmem > 0 {
		return d.gmem
	}
	return (d.milli*memMiB + allocator.MilliPerGPU - 1) / allocator.MilliPerGPU
}

// modelMilli is the per-model quota charge of one pod.
func (d *demand) modelMilli() int64 {
	switch d.kind {
	case kindMIG:
		return migMilli(d.mig.Compute)
	case kindCPU:
		return 0
	}
	return d.milli * int64(d.num)
}

// clone copies the free state; the fixed description is shared.
func (c *cluster) clone() *cluster {
	out := *c
	out.free = make([]nodeFree, len(c.free))
	total := 0
	for i := range c.free {
		total += len(c.free[i].gpus)
	}
	gpus := make([]gpuFree, 0, total)
	for i, f := range c.free {
		out.free[i] = f
		start := len(gpus)
		gpus = append(gpus, f.gpus...)
		out.free[i].gpus = gpus[start:len(gpus):len(gpus)]
	}
	return &out
}

// setHealth marks GPU g of node i healthy or not, keeping the free
// counters (which count healthy GPUs only) in step.
func (c *cluster) setHealth(i, g int, healthy bool) {
	sp := &c.info[i].gpus[g]
	if sp.healthy == healthy {
		return
	}
	sp.healthy = healthy
	if sp.mig {
		return
	}
	f := &c.free[i]
	sign := int64(1)
	if !healthy {
		sign = -1
	}
	f.milliFree += sign * f.gpus[g].milli
	if f.gpus[g].milli == allocator.MilliPerGPU {
		f.wholeFree += int(sign)
	}
}
