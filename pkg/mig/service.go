package mig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/timeslice"
	"github.com/gpud/gpud/pkg/usage"
)

// ErrBusyUnknown is wrapped when the service cannot tell which slices are
// in use (the kubelet does not answer, or NVML cannot list processes), so
// a plan that destroys slices is refused unless forced.
var ErrBusyUnknown = errors.New("mig: cannot tell which slices are in use")

// The service's sources of who holds a slice, small so tests can fake them.
type (
	// ProcessLister lists the compute processes on every GPU and MIG
	// device (a discovery.ProcessReader).
	ProcessLister interface {
		GPUProcesses(ctx context.Context) ([]usage.Process, error)
	}
	// AllocationLister lists the kubelet's device allocations (a
	// *podresources.Client): none when no kubelet runs here, an error when
	// one runs but does not answer.
	AllocationLister interface {
		Allocations(ctx context.Context) ([]usage.Assignment, error)
	}
)

// ServiceConfig configures a [Service].
type ServiceConfig struct {
	// Lib is an initialized NVML. Required.
	Lib nvml.Interface
	// Applier runs plans; nil means NewApplier(Lib, Log) (no journal, no
	// resets).
	Applier *Applier
	// Processes and Allocations are who holds a slice: a slice is busy when
	// a process runs on it OR the kubelet allocated it to a pod (which may
	// run no process at that moment). Processes is required; nil
	// Allocations means no kubelet on this node.
	Processes   ProcessLister
	Allocations AllocationLister
	// AllocationsTimeout bounds one read of the allocations; zero means 5s.
	AllocationsTimeout time.Duration
	// Changed is called after an apply or a recovery touched the GPUs
	// (also when it failed and rolled back), so the caller can rediscover
	// and re-advertise; nil means nothing to do.
	Changed func(Result)
	// Log may be nil.
	Log *slog.Logger
}

// Service is the one MIG pipeline: read the state, resolve a layout, find
// the busy slices, plan, apply. The agent (admin API, watched layout file,
// recovery at start) and `gpud mig` without an agent both use it, so both
// refuse the same things. It serializes plans and applies; it is safe for
// concurrent use.
type Service struct {
	cfg ServiceConfig
	mu  sync.Mutex
}

// NewService returns a service; it checks cfg.
func NewService(cfg ServiceConfig) (*Service, error) {
	if cfg.Lib == nil || cfg.Processes == nil {
		return nil, errors.New("mig: service needs Lib and Processes")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Applier == nil {
		cfg.Applier = NewApplier(cfg.Lib, cfg.Log)
	}
	if cfg.AllocationsTimeout <= 0 {
		cfg.AllocationsTimeout = 5 * time.Second
	}
	return &Service{cfg: cfg}, nil
}

// State reads the GPUs' MIG state.
func (s *Service) State() (State, error) { return ReadState(s.cfg.Lib) }

// Busy returns who holds which device: processes and kubelet allocations.
// When either cannot be read it returns what it has and an error wrapping
// ErrBusyUnknown.
func (s *Service) Busy(ctx context.Context) (Busy, error) {
	var errs []error
	ps, err := s.cfg.Processes.GPUProcesses(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: list gpu processes: %w", ErrBusyUnknown, err))
	}
	var as []usage.Assignment
	if s.cfg.Allocations != nil {
		actx, cancel := context.WithTimeout(ctx, s.cfg.AllocationsTimeout)
		as, err = s.cfg.Allocations.Allocations(actx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: read the kubelet's allocations: %w", ErrBusyUnknown, err))
		}
	}
	return BusyFrom(ps, as), errors.Join(errs...)
}

// BusyFrom marks each device a process runs on as held by "pid N" and each
// device the kubelet allocated as held by "namespace/pod"; a time-sliced
// replica (`<uuid>::<n>`) holds its device.
func BusyFrom(ps []usage.Process, as []usage.Assignment) Busy {
	b := Busy{}
	for _, p := range ps {
		b[p.DeviceUUID] = append(b[p.DeviceUUID], fmt.Sprintf("pid %d", p.PID))
	}
	for _, x := range as {
		for _, id := range x.DeviceIDs {
			uuid, _, _ := timeslice.ParseReplicaID(id)
			b[uuid] = append(b[uuid], x.Namespace+"/"+x.Pod)
		}
	}
	return b
}

// Plan resolves layout name of f against the GPUs and plans it without
// changing anything.
func (s *Service) Plan(ctx context.Context, f LayoutFile, name string, force bool) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, res, err := s.plan(ctx, f, name, force)
	return res, err
}

// Apply plans layout name of f and applies it. Without force it refuses to
// destroy a busy slice, and refuses any destruction when it cannot tell
// which slices are busy (ErrBusyUnknown).
func (s *Service) Apply(ctx context.Context, f LayoutFile, name string, force bool) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	want, res, err := s.plan(ctx, f, name, force)
	if err != nil {
		return res, err
	}
	res, err = s.cfg.Applier.Apply(ctx, res.State, want, res.Plan)
	s.changed(res)
	return res, err
}

// plan reads the state and the busy slices and plans; res holds the plan
// and the state it starts from.
func (s *Service) plan(ctx context.Context, f LayoutFile, name string, force bool) (Desired, Result, error) {
	st, err := ReadState(s.cfg.Lib)
	if err != nil {
		return Desired{}, Result{}, err
	}
	want, err := f.Resolve(name, st)
	if err != nil {
		return Desired{}, Result{State: st}, err
	}
	busy, busyErr := s.Busy(ctx)
	plan, err := NewPlan(st, want, busy, Options{Force: force})
	if err != nil {
		return want, Result{Plan: plan, State: st}, err
	}
	if busyErr != nil && !force && destroys(plan) {
		return want, Result{Plan: plan, State: st}, fmt.Errorf("%w; the plan destroys slices, so it is refused: retry when that works, or force it (gpud mig apply --force; the agent's --mig-force)", busyErr)
	}
	return want, Result{Plan: plan, State: st}, nil
}

// destroys reports whether a plan destroys any GPU instance or changes a
// GPU's MIG mode (which takes the GPU or all its slices from their users).
func destroys(p Plan) bool {
	for _, st := range p.Steps() {
		switch st.Kind {
		case StepDestroy, StepDisableMIG, StepEnableMIG:
			return true
		}
	}
	for _, g := range p.GPUs {
		if g.Pending != "" {
			return true
		}
	}
	return false
}

// Recover finishes or undoes an apply a crash cut short (see
// [Applier.Recover]). It reports whether there was anything to recover.
// When it cannot tell which slices are busy it leaves the journal for a
// later try and returns an error wrapping ErrBusyUnknown.
func (s *Service) Recover(ctx context.Context) (bool, Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	busy, err := s.Busy(ctx)
	if err != nil {
		return false, Result{}, fmt.Errorf("mig: recovery postponed: %w", err)
	}
	ok, res, err := s.cfg.Applier.Recover(ctx, busy)
	if ok {
		s.changed(res)
	}
	return ok, res, err
}

// RollBack undoes an apply a crash cut short (see [Applier.RollBack]). When
// it cannot tell which slices are busy it refuses unless force, as Apply
// does.
func (s *Service) RollBack(ctx context.Context, force bool) (bool, Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	busy, err := s.Busy(ctx)
	if err != nil && !force {
		return false, Result{}, fmt.Errorf("mig: rollback refused: %w; retry when that works, or force it", err)
	}
	ok, res, err := s.cfg.Applier.RollBack(ctx, busy, force)
	if ok {
		s.changed(res)
	}
	return ok, res, err
}

func (s *Service) changed(res Result) {
	if s.cfg.Changed != nil {
		s.cfg.Changed(res)
	}
}
