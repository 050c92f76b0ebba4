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

	"github.com/gpud/gpud/internal/fileio"
)

// nodeState is the state file's form: the MIG mode and layout, the
// compute mode and the per-cgroup memory limits per GPU. Node is the node's name and Profile its profile's;
// files written before node names counted have no Profile and name the
// profile in Node. The UUIDs are written for readers; loading derives them
// again from the names.
type nodeState struct {
	Node    string     `json:"node"`
	Profile string     `json:"profile,omitempty"`
	GPUs    []gpuState `json:"gpus"`
}

type gpuState struct {
	UUID         string    `json:"uuid"`
	MIGCurrent   int       `json:"migCurrent"`
	MIGPending   int       `json:"migPending"`
	ComputeMode  int       `json:"computeMode,omitempty"`
	GPUInstances []giState `json:"gpuInstances,omitempty"`
	// MemoryLimits are the per-cgroup memory limits, sorted by cgroup.
	MemoryLimits []memLimitState `json:"memoryLimits,omitempty"`
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

// saveStateLocked writes the state file atomically and durably
// (fileio.WriteFile: fixed temp name, fsync, rename), so a crash leaves the
// old or the new layout, never half of one. The simulated NVML call that
// changed the layout still succeeds (the hardware did change); the error is
// returned and kept for [Node.StateErr]. A closed node writes nothing.
func (n *Node) saveStateLocked() error {
	if n.statePath == "" || n.closed {
		return nil
	}
	data, err := json.MarshalIndent(n.snapshotLocked(), "", "  ")
	if err == nil {
		err = fileio.WriteFile(n.statePath, data, 0o600)
	}
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrStateFile, err)
	}
	n.stateErr = err
	return err
}

// snapshotLocked is the node's MIG, compute-mode and memory-limit state in
// the state file's form.
func (n *Node) snapshotLocked() nodeState {
	st := nodeState{Node: n.name, Profile: n.profile.Name}
	for _, d := range n.devices {
		g := gpuState{UUID: d.uuid, MIGCurrent: d.migCurrent, MIGPending: d.migPending, ComputeMode: int(d.computeMode),
			MemoryLimits: d.memLimitsSnapshotLocked()}
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
	return st
}

// StateErr returns the error of the latest state-file write, nil when it
// succeeded or there is no state file. A MIG change whose state could not
// be saved succeeds on the simulated hardware but is lost at the next
// start: callers that promise persistence (`gpud mig apply --simulate
// --sim-state-file`) check StateErr after changing the layout.
func (n *Node) StateErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stateErr
}

// removeStaleTemps removes the temp files a write of the state file that
// was killed left beside it: fileio.WriteFile's fixed one, and the random
// ones (.simnode-state-*) of versions before it. The state file itself is
// whole (written by rename), so they hold nothing it lacks.
func (n *Node) removeStaleTemps() {
	old, _ := filepath.Glob(filepath.Join(filepath.Dir(n.statePath), ".simnode-state-*"))
	old = append(old, fileio.TempName(n.statePath))
	for _, p := range old {
		_ = os.Remove(p) // best effort: they hold nothing the state file lacks
	}
}

// loadState restores the MIG layout from the state file, if there is one.
func (n *Node) loadState() error {
	data, err := fileio.ReadFile(n.statePath, fileio.MaxStateBytes)
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
	if !st.sameNode(n) || len(st.GPUs) != len(n.devices) {
		return fmt.Errorf("simnode: state file %s is for node %q (profile %q) with %d GPUs, not %q (profile %q) with %d; use that node name or remove the file to start clean",
			n.statePath, st.Node, st.profileName(), len(st.GPUs), n.name, n.profile.Name, len(n.devices))
	}
	for i, g := range st.GPUs {
		d := n.devices[i]
		d.migCurrent, d.migPending = g.MIGCurrent, g.MIGPending
		switch mode := nvml.ComputeMode(g.ComputeMode); mode {
		case nvml.COMPUTEMODE_DEFAULT, nvml.COMPUTEMODE_PROHIBITED, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
			d.computeMode = mode
		default:
			return fmt.Errorf("simnode: state file %s: gpu %d: compute mode %d: want 0 (default), 2 (prohibited) or 3 (exclusive process)", n.statePath, i, g.ComputeMode)
		}
		if err := d.loadMemLimits(g.MemoryLimits); err != nil {
			return fmt.Errorf("simnode: state file %s: gpu %d: %w", n.statePath, i, err)
		}
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

// sameNode reports whether the state file is the node's: the same node and
// profile names. A file of a version before node names counted holds only
// the profile's name, whatever the node was called; it loads into any node
// of that profile, whose UUIDs then derive from the node's name.
func (st nodeState) sameNode(n *Node) bool {
	if st.Profile == "" {
		return st.Node == n.profile.Name
	}
	return st.Node == n.name && st.Profile == n.profile.Name
}

// profileName is the profile the state file was written for.
func (st nodeState) profileName() string {
	if st.Profile == "" {
		return st.Node
	}
	return st.Profile
}

func nvmlPlacement(start, size uint32) nvml.GpuInstancePlacement {
	return nvml.GpuInstancePlacement{Start: start, Size: size}
}
