package jobsim

import (
	"errors"
	"fmt"
	"io"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/trace"
)

// NodeColumns are the node file's columns: the openb node list's five,
// then optional topology columns.
var NodeColumns = []string{"sn", "cpu_milli", "memory_mib", "gpu", "model", "gpu_mem_mib", "mig_gpus", "nvlink_domain", "rack", "zone"}

var nodeOptional = map[string]bool{"gpu_mem_mib": true, "mig_gpus": true, "nvlink_domain": true, "rack": true, "zone": true}

// ModelMemoryMiB is the GPU memory assumed for a model when the node file
// has no gpu_mem_mib column. openb's G1-G3 are undisclosed; they get 0
// (unknown), so memory-sized fractions do not fit on them.
var ModelMemoryMiB = map[string]int64{
	"P100": 16384, "T4": 15360, "V100M16": 16384, "V100M32": 32768, "A10": 24576,
	"A100": 81920, "H100": 81920, "H200": 143360, "L4": 23034,
}

// NodeOptions fill in topology a node file leaves out.
type NodeOptions struct {
	// NodesPerRack groups consecutive nodes into racks when the file has no
	// rack column; 0 means 16.
	NodesPerRack int
	// RacksPerZone groups consecutive racks into zones when the file has no
	// zone column; 0 means 8.
	RacksPerZone int
}

// ReadNodes parses a node file; values are bounded as in pkg/trace
// ([trace.MaxGPUsPerNode], ...). A node without nvlink_domain is its own
// NVLink domain; mig_gpus makes that many of its GPUs (the last ones) MIG
// GPUs.
func ReadNodes(r io.Reader, name string, o NodeOptions) ([]allocator.Node, error) {
	if o.NodesPerRack <= 0 {
		o.NodesPerRack = 16
	}
	if o.RacksPerZone <= 0 {
		o.RacksPerZone = 8
	}
	var out []allocator.Node
	var gpus trace.ClusterGPUs
	err := readRows(r, name, NodeColumns, nodeOptional, func(row *trace.Row) {
		i := len(out)
		n := allocator.Node{Name: row.Str("sn"), CPUMilli: row.IntIn("cpu_milli", 0, trace.MaxCPUMilli),
			MemoryMiB: row.IntIn("memory_mib", 0, trace.MaxMemoryMiB), Labels: map[string]string{}}
		num := gpus.Read(row, "gpu")
		model := row.Str("model")
		if model == "nan" {
			model = ""
		}
		mem := ModelMemoryMiB[model]
		if row.Str("gpu_mem_mib") != "" {
			mem = row.IntIn("gpu_mem_mib", 0, trace.MaxMemoryMiB)
		}
		mig := int(row.OptIntIn("mig_gpus", 0, int64(num)))
		if row.Err == nil && n.Name == "" {
			row.Fail("sn", errors.New("empty"))
		}
		if row.Err != nil {
			return
		}
		for g := range num {
			gpu := allocator.GPU{Model: model, MemoryMiB: mem}
			if g >= num-mig {
				gpu.Labels = map[string]string{jobs.LabelMIG: "true"}
			}
			n.GPUs = append(n.GPUs, gpu)
		}
		rack := row.Str("rack")
		if rack == "" {
			rack = fmt.Sprintf("rack-%03d", i/o.NodesPerRack)
		}
		zone := row.Str("zone")
		if zone == "" {
			zone = fmt.Sprintf("zone-%d", i/(o.NodesPerRack*o.RacksPerZone))
		}
		n.Labels[jobs.LabelRack], n.Labels[jobs.LabelZone] = rack, zone
		if d := row.Str("nvlink_domain"); d != "" {
			n.Labels[jobs.LabelNVLinkDomain] = d
		}
		out = append(out, n)
	})
	return out, err
}
