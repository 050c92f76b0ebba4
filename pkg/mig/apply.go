package mig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Applier runs plans through NVML. It is safe for one Apply at a time; the
// caller serializes (the agent holds a lock around it).
type Applier struct {
	lib     nvml.Interface
	devlib  device.Interface
	log     *slog.Logger
	journal string
	reset   func(gpu int) error
}

// ApplierOption configures an Applier.
type ApplierOption func(*Applier)

// WithJournal makes Apply record what it is doing in path (the starting
// layout and the target) before the first step and remove it when done, so
// Recover can finish or undo an apply cut short by a crash.
func WithJournal(path string) ApplierOption { return func(a *Applier) { a.journal = path } }

// WithResetter lets Apply reset a GPU whose MIG mode change needs one
// (A100) and carry on with its steps, as mig-parted does with nvidia-smi -r.
// Without it such a GPU is reported pending.
func WithResetter(reset func(gpu int) error) ApplierOption {
	return func(a *Applier) { a.reset = reset }
}

// NewApplier returns an Applier on an initialized NVML; log may be nil.
func NewApplier(lib nvml.Interface, log *slog.Logger, opts ...ApplierOption) *Applier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Applier{lib: lib, devlib: device.New(lib), log: log}
	for _, o := range opts {
		o(a)
	}
	return a
}

// Result is what an apply did.
type Result struct {
	Plan Plan `json:"plan"`
	// Pending maps GPUs that wait for a reset to the reason; their
	// remaining steps run after the reset, on the next apply.
	Pending map[int]string `json:"pending,omitempty"`
	// State is the layout after the apply (or after the rollback).
	State State `json:"state"`
}

// Apply runs plan (made from start toward want) GPU by GPU and checks each
// GPU against want afterwards. When a step or a check fails, or ctx ends
// between steps, it puts every GPU it touched back to its layout in start
// and returns an error wrapping ErrRolledBack and the cause; if the
// rollback fails too, both errors are returned and the journal is kept.
// When the apply ended (done or rolled back) but its journal cannot be
// removed, the error wraps ErrJournalKept: res still says what was done.
// While the journal of an earlier apply is there (a crash, or a rollback
// that failed), Apply changes nothing and returns an error wrapping
// ErrInterrupted: Recover or RollBack first.
func (a *Applier) Apply(ctx context.Context, start State, want Desired, plan Plan) (Result, error) {
	if j, found, err := a.interrupted(); found {
		st, _ := ReadState(a.lib)
		if err == nil {
			err = fmt.Errorf("%w: the apply of %q (journal %s) may have left GPUs half-applied", ErrInterrupted, j.Config, a.journal)
		}
		return Result{Plan: plan, State: st}, fmt.Errorf("mig: apply %q refused: %w; run `gpud mig recover` (or `gpud mig recover --rollback`) first", want.Config, err)
	}
	return a.apply(ctx, start, want, plan)
}

// apply is Apply without the check for an interrupted apply: Recover and
// RollBack use it to replace that apply's journal with their own.
func (a *Applier) apply(ctx context.Context, start State, want Desired, plan Plan) (Result, error) {
	res := Result{Plan: plan, Pending: map[int]string{}}
	if plan.Empty() && (a.reset == nil || !plan.hasPending()) {
		for _, g := range plan.GPUs {
			if g.Pending != "" {
				res.Pending[g.GPU] = g.Pending
			}
		}
		st, err := ReadState(a.lib)
		res.State = st
		return res, err
	}
	if err := a.writeJournal(journal{Config: want.Config, Start: start, Want: want}); err != nil {
		return res, err
	}
	var touched []int
	for _, gp := range plan.GPUs {
		if gp.Pending != "" {
			next, ok := a.afterReset(gp, want)
			if !ok {
				res.Pending[gp.GPU] = gp.Pending
				continue
			}
			gp = next
		}
		touched = append(touched, gp.GPU)
		pending, err := a.applyGPU(ctx, start, gp)
		if err == nil && pending == "" {
			err = a.verify(gp.GPU, want.GPUs[gp.GPU], gp.Keep)
		}
		if pending != "" {
			res.Pending[gp.GPU] = pending
			a.log.Info("mig mode change pending reset", "gpu", gp.GPU, "gpu_uuid", gp.UUID)
		}
		if err != nil {
			a.log.Warn("mig apply failed, rolling back", "gpu", gp.GPU, "err", err)
			rbErr := a.rollback(start, touched)
			st, _ := ReadState(a.lib)
			res.State = st
			if rbErr != nil {
				return res, fmt.Errorf("mig: apply %q failed on gpu %d: %w; rollback failed too: %w", want.Config, gp.GPU, err, rbErr)
			}
			return res, errors.Join(fmt.Errorf("%w: %q on gpu %d: %w", ErrRolledBack, want.Config, gp.GPU, err), a.removeJournal())
		}
		a.log.Info("mig layout applied", "gpu", gp.GPU, "gpu_uuid", gp.UUID, "config", want.Config, "steps", len(gp.Steps))
	}
	jerr := a.removeJournal()
	st, err := ReadState(a.lib)
	res.State = st
	return res, errors.Join(jerr, err)
}

// afterReset resets a GPU whose mode change is pending (with a resetter)
// and replans it; ok is false when it stays pending.
func (a *Applier) afterReset(gp GPUPlan, want Desired) (GPUPlan, bool) {
	if a.reset == nil {
		return gp, false
	}
	if err := a.reset(gp.GPU); err != nil {
		a.log.Warn("gpu reset failed, mig mode change stays pending", "gpu", gp.GPU, "err", err)
		return gp, false
	}
	cur, err := ReadState(a.lib)
	if err != nil {
		return gp, false
	}
	p, err := NewPlan(cur, Desired{Config: want.Config, GPUs: map[int]GPUWants{gp.GPU: want.GPUs[gp.GPU]}}, nil, Options{})
	if err != nil || len(p.GPUs) == 0 || p.GPUs[0].Pending != "" {
		return gp, false
	}
	a.log.Info("gpu reset for pending mig mode change", "gpu", gp.GPU)
	return p.GPUs[0], true
}

// applyGPU runs one GPU's steps; it returns a pending reason when a MIG
// mode change waits for a reset (the remaining steps are skipped).
func (a *Applier) applyGPU(ctx context.Context, start State, gp GPUPlan) (string, error) {
	dev, ret := a.lib.DeviceGetHandleByIndex(gp.GPU)
	if err := nvmlErr(ret); err != nil {
		return "", fmt.Errorf("gpu %d: %w", gp.GPU, err)
	}
	g := start.GPU(gp.GPU)
	if g == nil {
		return "", fmt.Errorf("gpu %d: not in the starting state", gp.GPU)
	}
	for _, s := range gp.Steps {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("before %s: %w", s, err)
		}
		pending, err := a.step(dev, g.Catalog, s)
		if err != nil {
			return "", fmt.Errorf("%s: %w", s, err)
		}
		if pending {
			if a.reset == nil {
				return fmt.Sprintf("MIG mode change on gpu %d waits for a GPU reset", gp.GPU), nil
			}
			if err := a.reset(gp.GPU); err != nil {
				return fmt.Sprintf("MIG mode change on gpu %d waits for a GPU reset (reset failed: %v)", gp.GPU, err), nil
			}
			a.log.Info("gpu reset for mig mode change", "gpu", gp.GPU)
		}
		a.log.Debug("mig step done", "step", s.String())
	}
	return "", nil
}

// step runs one step; pending is true when a mode change needs a reset.
func (a *Applier) step(dev nvml.Device, cat Catalog, s Step) (pending bool, err error) {
	switch s.Kind {
	case StepEnableMIG, StepDisableMIG:
		mode := nvml.DEVICE_MIG_DISABLE
		if s.Kind == StepEnableMIG {
			mode = nvml.DEVICE_MIG_ENABLE
		}
		activation, ret := dev.SetMigMode(mode)
		if err := nvmlErr(ret); err != nil {
			return false, err
		}
		if activation == nvml.ERROR_RESET_REQUIRED {
			return true, nil
		}
		return false, nvmlErr(activation)
	case StepDestroy:
		gi, ret := dev.GetGpuInstanceById(s.GIID)
		if err := nvmlErr(ret); err != nil {
			return false, err
		}
		return false, destroyGI(gi)
	case StepCreateCI:
		gi, ret := dev.GetGpuInstanceById(s.GIID)
		if err := nvmlErr(ret); err != nil {
			return false, err
		}
		p, err := cat.Lookup(s.Profile)
		if err != nil {
			return false, err
		}
		return false, createFullCI(gi, p.Slices)
	case StepCreate:
		p, err := cat.Lookup(s.Profile)
		if err != nil {
			return false, err
		}
		info, ret := dev.GetGpuInstanceProfileInfo(p.Index)
		if err := nvmlErr(ret); err != nil {
			return false, fmt.Errorf("profile info: %w", err)
		}
		gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(s.Placement.Start), Size: uint32(s.Placement.Size)})
		if err := nvmlErr(ret); err != nil {
			return false, err
		}
		if err := createFullCI(gi, p.Slices); err != nil {
			// Leave no GPU instance without its compute instance behind.
			if derr := nvmlErr(gi.Destroy()); derr != nil {
				return false, errors.Join(err, fmt.Errorf("destroy the new gpu instance: %w", derr))
			}
			return false, err
		}
		return false, nil
	}
	return false, fmt.Errorf("unknown step kind %q", s.Kind)
}

// createFullCI creates the compute instance spanning the GPU instance.
func createFullCI(gi nvml.GpuInstance, slices int) error {
	for idx := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(idx, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS || int(info.SliceCount) != slices {
			continue
		}
		_, ret = gi.CreateComputeInstance(&info)
		if err := nvmlErr(ret); err != nil {
			return fmt.Errorf("create compute instance: %w", err)
		}
		return nil
	}
	return fmt.Errorf("create compute instance: no %d-slice compute profile: %w", slices, nvml.ERROR_NOT_SUPPORTED)
}

// destroyGI destroys a GPU instance's compute instances, then the instance.
func destroyGI(gi nvml.GpuInstance) error {
	cis, err := computeInstances(gi)
	if err != nil {
		return err
	}
	for _, c := range cis {
		if err := nvmlErr(c.ci.Destroy()); err != nil {
			return fmt.Errorf("destroy compute instance: %w", err)
		}
	}
	if err := nvmlErr(gi.Destroy()); err != nil {
		return fmt.Errorf("destroy gpu instance: %w", err)
	}
	return nil
}

// verify rereads one GPU and checks it holds exactly the wanted slices,
// each complete, with the kept instances untouched.
func (a *Applier) verify(index int, w GPUWants, keep []Instance) error {
	dev, ret := a.lib.DeviceGetHandleByIndex(index)
	if err := nvmlErr(ret); err != nil {
		return fmt.Errorf("%w: gpu %d: %w", ErrVerify, index, err)
	}
	g, err := readGPU(index, dev, a.devlib)
	if err != nil {
		return fmt.Errorf("%w: gpu %d: %w", ErrVerify, index, err)
	}
	return checkGPU(g, w, keep)
}

func checkGPU(g GPUState, w GPUWants, keep []Instance) error {
	if g.MIGEnabled != w.MIGEnabled {
		return fmt.Errorf("%w: gpu %d: MIG is %s, want %s", ErrVerify, g.Index, onOff(g.MIGEnabled), onOff(w.MIGEnabled))
	}
	if !w.MIGEnabled {
		return nil
	}
	var have, want []string
	for _, in := range g.Instances {
		if !in.Complete() {
			return fmt.Errorf("%w: gpu %d: %s has no complete compute instance", ErrVerify, g.Index, in)
		}
		have = append(have, in.Profile)
	}
	for _, s := range w.Slices {
		want = append(want, s.Profile)
		if s.Start >= 0 && !slices.ContainsFunc(g.Instances, func(in Instance) bool { return in.Profile == s.Profile && in.Placement.Start == s.Start }) {
			return fmt.Errorf("%w: gpu %d: no %s", ErrVerify, g.Index, s)
		}
	}
	sort.Strings(have)
	sort.Strings(want)
	if !slices.Equal(have, want) {
		return fmt.Errorf("%w: gpu %d holds %v, want %v", ErrVerify, g.Index, have, want)
	}
	for _, k := range keep {
		if !slices.ContainsFunc(g.Instances, func(in Instance) bool { return in.GIID == k.GIID && in.Placement == k.Placement }) {
			return fmt.Errorf("%w: gpu %d: kept %s (gi %d) is gone", ErrVerify, g.Index, k, k.GIID)
		}
	}
	return nil
}

// rollback puts the GPUs back to their layouts in start: the same mode and
// the same profiles at the same placements (new UUIDs where recreated).
func (a *Applier) rollback(start State, gpus []int) error {
	var errs []error
	for _, i := range gpus {
		g := start.GPU(i)
		if g == nil {
			continue
		}
		cur, err := ReadState(a.lib)
		if err != nil {
			errs = append(errs, fmt.Errorf("gpu %d: %w", i, err))
			continue
		}
		back := Desired{Config: "rollback", GPUs: map[int]GPUWants{i: layoutOf(*g)}}
		p, err := NewPlan(cur, back, nil, Options{Force: true})
		if err != nil {
			errs = append(errs, fmt.Errorf("gpu %d: plan: %w", i, err))
			continue
		}
		for _, gp := range p.GPUs {
			if _, err := a.applyGPU(context.WithoutCancel(context.Background()), cur, gp); err != nil {
				errs = append(errs, fmt.Errorf("gpu %d: %w", i, err))
			}
		}
		a.log.Info("mig rollback done", "gpu", i, "steps", len(p.Steps()))
	}
	return errors.Join(errs...)
}

// layoutOf is a GPU's current layout as a desired one, placements pinned.
func layoutOf(g GPUState) GPUWants {
	w := GPUWants{MIGEnabled: g.MIGEnabled}
	for _, in := range g.Instances {
		w.Slices = append(w.Slices, Want{Profile: in.Profile, Start: in.Placement.Start})
	}
	return w
}
