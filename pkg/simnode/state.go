package simnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nodeState is the state file's form: the MIG mode and layout per GPU.
type nodeState struct {
	Node string     `json:"node"`
	GPUs []gpuState `json:"gpus"`
}

type gpuState struct {
	UUID         string    `json:"uuid"`
	MIGCurrent   int       `json:"migCurrent"`
	MIGPending   int       `json:"migPending"`
	GPUInstances []giState `json:"gpuInstances,omitempty"`
}

type giState struct {
	ID               int       `json:"id"`
	ProfileIndex     int       `json:"profileIndex"`
	PlacementStart   uint32    `json:"placementStart"`
	PlacementSize    uint32    `json:"placementSize"`
	ComputeInstances []ciState `json:"computeInstances,omitempty"`
}

type ciState struct {
	ID           int `json:"id"`
	ProfileIndex int `json:"profileIndex"`
}

// saveStateLocked writes the state file atomically (temp file + rename), so
// a crash leaves the old or the new layout, never half of one. Errors are
// not fatal to the simulated call; the file is best effort as the hardware
// is the truth.
func (n *Node) saveStateLocked() {
	if n.statePath == "" {
		return
	}
	st := nodeState{Node: n.profile.Name}
	for _, d := range n.devices {
		g := gpuState{UUID: d.uuid, MIGCurrent: d.migCurrent, MIGPending: d.migPending}
		for _, gi := range d.sortedGIsLocked() {
			gs := giState{ID: gi.id, ProfileIndex: gi.profileIdx, PlacementStart: gi.placement.Start, PlacementSize: gi.placement.Size}
			ids := make([]int, 0, len(gi.cis))
			for id := range gi.cis {
				ids = append(ids, id)
			}
			sort.Ints(ids)
			for _, id := range ids {
				gs.ComputeInstances = append(gs.ComputeInstances, ciState{ID: id, ProfileIndex: gi.cis[id].profileIdx})
			}
			g.GPUInstances = append(g.GPUInstances, gs)
		}
		st.GPUs = append(st.GPUs, g)
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(n.statePath), ".simnode-state-*")
	if err != nil {
		return
	}
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return
	}
	_ = os.Rename(tmp.Name(), n.statePath)
}

// loadState restores the MIG layout from the state file, if there is one.
func (n *Node) loadState() error {
	data, err := os.ReadFile(n.statePath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("simnode: read state file: %w", err)
	}
	var st nodeState
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("simnode: state file %s: %w", n.statePath, err)
	}
	if st.Node != n.profile.Name || len(st.GPUs) != len(n.devices) {
		return fmt.Errorf("simnode: state file %s is for node %q with %d GPUs, not %q with %d; remove it to start clean",
			n.statePath, st.Node, len(st.GPUs), n.profile.Name, len(n.devices))
	}
	for i, g := range st.GPUs {
		d := n.devices[i]
		d.migCurrent, d.migPending = g.MIGCurrent, g.MIGPending
		for _, gs := range g.GPUInstances {
			if _, ok := d.profileInfo(gs.ProfileIndex); !ok {
				return fmt.Errorf("simnode: state file %s: gpu %d: profile index %d not on %s", n.statePath, i, gs.ProfileIndex, n.profile.Model)
			}
			gi := d.addGpuInstanceLocked(gs.ProfileIndex, gs.ID, nvmlPlacement(gs.PlacementStart, gs.PlacementSize))
			for _, cs := range gs.ComputeInstances {
				gi.addComputeInstanceLocked(cs.ProfileIndex, cs.ID)
			}
		}
	}
	return nil
}

func nvmlPlacement(start, size uint32) nvml.GpuInstancePlacement {
	return nvml.GpuInstancePlacement{Start: start, Size: size}
}
