package mig

import (
	"context"
	"errors"
	"fmt"
)

// ErrSliceNotFound is wrapped when the GPU a slice is asked for is not on
// this node, or a created slice is not where it was put.
var ErrSliceNotFound = errors.New("mig: not found")

// Slice is one MIG device made by [Slices.Create]: a GPU instance and its
// one full compute instance.
type Slice struct {
	// UUID is the MIG device's UUID (MIG-...).
	UUID string `json:"uuid"`
	// GPU is the parent GPU's index.
	GPU int `json:"gpu"`
	// GIID and CIID are the GPU and compute instance IDs.
	GIID int `json:"giID"`
	CIID int `json:"ciID"`
	// ModeEnabled is true when [Slices.Create] turned the GPU's MIG mode
	// on for this slice. The caller records it durably (the DRA
	// checkpoint) and passes restoreMode to [Slices.Destroy], so the GPU
	// is whole again after its last such slice goes, across restarts.
	ModeEnabled bool `json:"modeEnabled,omitempty"`
}

// Slices creates and destroys single MIG devices on demand (for claims the
// DRA driver prepares) through the service's pipeline: the same lock as
// layout applies, the applier with its journal and rollback, and the
// service's Changed hook so the caller rediscovers. Each change is a plan
// from the GPU's current layout to that layout plus or minus one slice,
// so every other slice is kept as it is. Slices keeps no state of its
// own: which GPUs' MIG mode it turned on is the caller's to persist
// ([Slice.ModeEnabled]), so a restart forgets nothing.
type Slices struct {
	svc *Service
}

// NewSlices returns the slice manager on svc.
func NewSlices(svc *Service) *Slices {
	return &Slices{svc: svc}
}

// Find returns the complete slice of profile at placement start on the
// GPU with UUID parent as the hardware has it now, and false when there is
// none; modeOn is the GPU's current MIG mode. It reads NVML, so it is
// right even when the caller's picture of the node lags a change.
func (m *Slices) Find(parent, profile string, start int) (s Slice, found, modeOn bool, err error) {
	m.svc.mu.Lock()
	defer m.svc.mu.Unlock()
	st, err := ReadState(m.svc.cfg.Lib)
	if err != nil {
		return Slice{}, false, false, err
	}
	g := gpuByUUID(st, parent)
	if g == nil {
		return Slice{}, false, false, fmt.Errorf("%w: gpu %s", ErrSliceNotFound, parent)
	}
	for _, in := range g.Instances {
		if in.Profile == profile && in.Placement.Start == start && in.Complete() {
			return Slice{UUID: in.CIs[0].UUID, GPU: g.Index, GIID: in.GIID, CIID: in.CIs[0].ID}, true, g.MIGEnabled, nil
		}
	}
	return Slice{}, false, g.MIGEnabled, nil
}

// Create makes a GPU instance of profile at placement start on the GPU
// with UUID parent, and its full compute instance, turning MIG mode on
// first when it is off. A failure is rolled back by the applier: nothing
// is left half-created. A GPU whose mode change waits for a reset is an
// error (and its mode change is left pending, as a layout apply leaves it).
func (m *Slices) Create(ctx context.Context, parent, profile string, start int) (Slice, error) {
	m.svc.mu.Lock()
	defer m.svc.mu.Unlock()
	st, err := ReadState(m.svc.cfg.Lib)
	if err != nil {
		return Slice{}, err
	}
	g := gpuByUUID(st, parent)
	if g == nil {
		return Slice{}, fmt.Errorf("%w: gpu %s", ErrSliceNotFound, parent)
	}
	w := layoutOf(*g)
	w.MIGEnabled = true
	w.Slices = append(w.Slices, Want{Profile: profile, Start: start})
	res, err := m.apply(ctx, st, g.Index, w)
	if err != nil {
		return Slice{}, fmt.Errorf("mig: create %s at %d on gpu %d: %w", profile, start, g.Index, err)
	}
	if after := res.State.GPU(g.Index); after != nil {
		for _, in := range after.Instances {
			if in.Profile == profile && in.Placement.Start == start && in.Complete() {
				return Slice{UUID: in.CIs[0].UUID, GPU: g.Index, GIID: in.GIID, CIID: in.CIs[0].ID, ModeEnabled: !g.MIGEnabled}, nil
			}
		}
	}
	return Slice{}, fmt.Errorf("%w: %s at %d on gpu %d after the apply", ErrSliceNotFound, profile, start, g.Index)
}

// Destroy removes the MIG device with UUID uuid (its GPU instance and
// compute instances) from the GPU with UUID parent, keeping every other
// slice. A device that does not exist is not an error. A device a process
// runs on is refused (ErrBusy). With restoreMode (the caller turned the
// GPU's MIG mode on, see [Slice.ModeEnabled]), MIG mode goes off again
// when no slice is left, also when the device was gone already (a crash
// after its destroy): the whole GPU is back. modeOff reports the GPU's
// MIG mode is off when Destroy returns.
func (m *Slices) Destroy(ctx context.Context, parent, uuid string, restoreMode bool) (modeOff bool, err error) {
	m.svc.mu.Lock()
	defer m.svc.mu.Unlock()
	st, err := ReadState(m.svc.cfg.Lib)
	if err != nil {
		return false, err
	}
	g := gpuByUUID(st, parent)
	if g == nil {
		return false, fmt.Errorf("%w: gpu %s", ErrSliceNotFound, parent)
	}
	var target *Instance
	for i, in := range g.Instances {
		for _, ci := range in.CIs {
			if ci.UUID == uuid {
				target = &g.Instances[i]
			}
		}
	}
	w := GPUWants{MIGEnabled: true}
	for _, in := range g.Instances {
		if target == nil || in.GIID != target.GIID {
			w.Slices = append(w.Slices, Want{Profile: in.Profile, Start: in.Placement.Start})
		}
	}
	off := restoreMode && len(w.Slices) == 0 && g.MIGEnabled
	if target == nil && !off {
		return !g.MIGEnabled, nil // gone already
	}
	if target != nil {
		ps, err := m.svc.cfg.Processes.GPUProcesses(ctx)
		if err != nil {
			return false, fmt.Errorf("%w: destroy %s: list gpu processes: %w", ErrBusyUnknown, uuid, err)
		}
		if holders := BusyFrom(ps, nil).holders(target.UUIDs()...); len(holders) > 0 {
			return false, fmt.Errorf("%w: destroy %s on gpu %d: held by %v", ErrBusy, uuid, g.Index, holders)
		}
	}
	if off {
		w.MIGEnabled = false
	}
	if _, err := m.apply(ctx, st, g.Index, w); err != nil {
		return false, fmt.Errorf("mig: destroy %s on gpu %d: %w", uuid, g.Index, err)
	}
	return off || !g.MIGEnabled, nil
}

// apply moves one GPU from st to w through the service's applier and
// reports the change. A mode change that waits for a reset is an error.
func (m *Slices) apply(ctx context.Context, st State, gpu int, w GPUWants) (Result, error) {
	want := Desired{Config: "dra", GPUs: map[int]GPUWants{gpu: w}}
	plan, err := NewPlan(st, want, nil, Options{})
	if err != nil {
		return Result{State: st}, err
	}
	res, err := m.svc.cfg.Applier.Apply(ctx, st, want, plan)
	m.svc.changed(res)
	if err != nil {
		return res, err
	}
	if reason, ok := res.Pending[gpu]; ok {
		return res, errors.New(reason)
	}
	return res, nil
}

func gpuByUUID(st State, uuid string) *GPUState {
	for i := range st.GPUs {
		if st.GPUs[i].UUID == uuid {
			return &st.GPUs[i]
		}
	}
	return nil
}
