package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/procattr"
)

// InventoryFunc returns the agent's current inventory and whether one was
// read yet.
type InventoryFunc func() (gpu.Inventory, bool)

// Lister lists the kubelet's device assignments (a *podresources.Client).
type Lister interface {
	List(ctx context.Context) ([]podresources.Assignment, error)
}

// ProcResolver finds the container of a process (a procattr.Resolver).
type ProcResolver interface {
	Lookup(pid uint32) (procattr.Container, error)
}

// PodNamer maps pod UIDs to names (a procattr.PodLogs).
type PodNamer interface {
	Pods() (map[string]procattr.PodRef, error)
}

var (
	_ Lister       = (*podresources.Client)(nil)
	_ ProcResolver = procattr.Resolver{}
	_ PodNamer     = procattr.PodLogs{}
)

// Attribution is where the sampler learns who uses a device. Nil fields
// turn that part off: without Pods no device gets pod labels, without
// Procs processes are listed without containers.
type Attribution struct {
	Pods  Lister
	Procs ProcResolver
	Names PodNamer
}

// Sampler reads NVML into a cache in the background. Create it with
// [NewSampler], run it with [Sampler.Run] (once), read it with
// [Sampler.Snapshot] from any goroutine.
type Sampler struct {
	lib  nvml.Interface
	inv  InventoryFunc
	attr Attribution
	cfg  Config
	log  *slog.Logger
	// throttleOnly: the driver has only the deprecated clocks throttle
	// reasons call (see reading.throttleOnly).
	throttleOnly bool

	snap atomic.Pointer[Snapshot]

	mu       sync.Mutex // guards everything below
	devs     []*devState
	byUUID   map[string]*devState
	errs     map[errKey]uint64
	sweeps   uint64
	lastXid  map[string]uint64
	xids     map[xidKey]uint64
	pids     map[uint32]pidEntry
	podNames map[string]procattr.PodRef
	assigned []podresources.Assignment
	podUp    bool
	attrErrs map[string]uint64
	closed   bool             // by Close: no more GPM samples
	toFree   []nvml.GpmSample // GPM samples to free once the lock is released
}

type errKey struct{ uuid, call, reason string }

type xidKey struct {
	uuid string
	xid  uint64
}

type pidEntry struct {
	c   procattr.Container
	err error
}

// devState is a device's mutable state; snap holds its meta and values.
type devState struct {
	snap     DeviceSnapshot
	handle   nvml.Device
	inflight [numSlots]bool // calls, then the process list and GPM
	gpm      gpmState
	procs    []discovery.Process
	procsAt  time.Time
	util     procUtil // per-process SM utilization (procutil.go)
}

// Slots of a device's in-flight calls beyond calls: the process list and
// the GPM sample (gpm.go).
const (
	slotProcs = numCalls
	slotGPM   = numCalls + 1
	numSlots  = numCalls + 2
)

// NewSampler returns a sampler of lib's devices as inv lists them. log
// gets constant messages; attr may be zero.
func NewSampler(lib nvml.Interface, inv InventoryFunc, attr Attribution, cfg Config, log *slog.Logger) (*Sampler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sampler{
		lib: lib, inv: inv, attr: attr, cfg: cfg.withDefaults(), log: log,
		throttleOnly: throttleOnly(lib),
		byUUID:       map[string]*devState{},
		errs:         map[errKey]uint64{},
		lastXid:      map[string]uint64{},
		xids:         map[xidKey]uint64{},
		pids:         map[uint32]pidEntry{},
		attrErrs:     map[string]uint64{},
	}, nil
}

// Config returns the sampler's configuration, defaults filled in.
func (s *Sampler) Config() Config { return s.cfg }

// Run samples every Interval until ctx ends. It returns nil when ctx
// ends, after [Sampler.Close]; NVML failures are counted, never returned.
// Xid events come in through [Sampler.RecordXid].
func (s *Sampler) Run(ctx context.Context) error {
	defer s.Close()
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.Sweep(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep samples every device once: it starts each NVML call that is not
// still running from an earlier sweep, waits up to CallTimeout for them,
// refreshes pod attribution, and publishes a snapshot. Tests call it
// directly; Run calls it every Interval.
func (s *Sampler) Sweep(ctx context.Context) {
	start := s.cfg.Clock()
	inv, ok := s.inv()
	if !ok {
		return
	}
	s.syncDevices(inv)
	s.freeQueued()

	var wg sync.WaitGroup
	type launched struct {
		d *devState
		i int
	}
	var started []launched
	s.mu.Lock()
	for _, d := range s.devs {
		if d.handle == nil {
			h, ret := s.lib.DeviceGetHandleByUUID(d.snap.UUID)
			if ret != nvml.SUCCESS {
				s.errs[errKey{d.snap.UUID, "DeviceGetHandleByUUID", reason(ret)}]++
				continue
			}
			d.handle = h
		}
		for i := range numSlots {
			if !s.applies(d, i) {
				continue
			}
			// A call still running from an earlier sweep owns its state
			// (runGPM reads d.gpm without the lock): check before touching it.
			if d.inflight[i] {
				s.errs[errKey{d.snap.UUID, callName(i), "busy"}]++
				continue
			}
			if i == slotGPM {
				parent := d.handle
				if d.snap.MIG {
					p := s.byUUID[d.snap.GPUUUID]
					if p == nil || p.handle == nil {
						continue // its GPU's handle comes first, in this sweep or the next
					}
					parent = p.handle
				}
				d.gpm.uuid, d.gpm.mig, d.gpm.giid, d.gpm.parent = d.snap.UUID, d.snap.MIG, d.snap.GIID, parent
			}
			d.inflight[i] = true
			started = append(started, launched{d, i})
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.run(d, i)
			}()
		}
	}
	s.mu.Unlock()

	s.refreshAssignments(ctx)

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timer := time.NewTimer(s.cfg.CallTimeout)
	select {
	case <-done:
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()

	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range started {
		if l.d.inflight[l.i] {
			s.errs[errKey{l.d.snap.UUID, callName(l.i), "timeout"}]++
		}
	}
	s.sweeps++
	s.attributeProcsLocked()
	snap := s.buildLocked(start)
	snap.Duration = s.cfg.Clock().Sub(start)
	s.snap.Store(snap)
}

// applies reports whether call i is asked of device d.
func (s *Sampler) applies(d *devState, i int) bool {
	if i == slotGPM {
		return !s.closed && !d.gpm.unsupported
	}
	return s.appliesMeta(&d.snap, i)
}

func (s *Sampler) appliesMeta(d *DeviceSnapshot, i int) bool {
	if i == len(calls) {
		return !d.MIG
	}
	c := calls[i]
	if d.MIG {
		return c.onMIG
	}
	if c.name == "GetUtilizationRates" && d.MIGEnabled {
		return false // NVML has no whole-GPU utilization in MIG mode
	}
	return c.onGPU
}

// fieldApplies reports whether some call asked of d fills field f.
func (s *Sampler) fieldApplies(d *DeviceSnapshot, f field) bool {
	if f.gpm() {
		return d.GPM
	}
	for i, c := range calls {
		if s.appliesMeta(d, i) && slices.Contains(c.fields, f) {
			return true
		}
	}
	return false
}

func callName(i int) string {
	switch i {
	case slotProcs:
		return callProcesses
	case slotGPM:
		return callGPMSample
	}
	return calls[i].name
}

// run makes call i on d without the lock, then stores what it returned.
func (s *Sampler) run(d *devState, i int) {
	if i == slotGPM {
		s.runGPM(d)
		return
	}
	if i == len(calls) {
		procs, err := discovery.GPUProcesses(d.handle, d.snap.GPUIndex)
		util, utilRet := d.util.read(d.handle, len(procs) > 0 && err == nil)
		at := s.cfg.Clock()
		s.mu.Lock()
		defer s.mu.Unlock()
		d.inflight[i] = false
		if utilRet != nvml.SUCCESS {
			s.errs[errKey{d.snap.UUID, callProcessUtilization, reason(utilRet)}]++
		}
		if err != nil {
			ret := nvml.ERROR_UNKNOWN
			errors.As(err, &ret)
			s.errs[errKey{d.snap.UUID, callProcesses, reason(ret)}]++
			return
		}
		d.procs, d.procsAt = procs, at
		d.util.sm = util
		return
	}
	c := calls[i]
	r := reading{throttleOnly: s.throttleOnly}
	ret := c.read(d.handle, &r)
	at := s.cfg.Clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	d.inflight[i] = false
	switch {
	case errors.Is(ret, nvml.ERROR_NOT_SUPPORTED):
		for _, f := range c.fields {
			d.snap.Unsupported[f] = true
		}
		return
	case ret != nvml.SUCCESS:
		s.errs[errKey{d.snap.UUID, c.name, reason(ret)}]++
		return
	}
	for _, f := range c.fields {
		if !r.ok[f] {
			d.snap.Unsupported[f] = true
			continue
		}
		d.snap.Values[f], d.snap.At[f], d.snap.Unsupported[f] = r.vals[f], at, false
	}
}

// syncDevices makes the device list follow the inventory, keeping the
// values and handles of devices that stay.
func (s *Sampler) syncDevices(inv gpu.Inventory) {
	s.mu.Lock()
	defer s.mu.Unlock()
	devs := make([]*devState, 0, len(s.devs))
	byUUID := make(map[string]*devState, len(s.byUUID))
	keep := func(meta DeviceSnapshot) {
		d := s.byUUID[meta.UUID]
		if d == nil || d.snap.MIG != meta.MIG || d.snap.GIID != meta.GIID {
			d = &devState{}
		}
		vals, at, unsup, gpm := d.snap.Values, d.snap.At, d.snap.Unsupported, d.snap.GPM
		d.snap = meta
		d.snap.Values, d.snap.At, d.snap.Unsupported, d.snap.GPM = vals, at, unsup, gpm
		devs = append(devs, d)
		byUUID[meta.UUID] = d
	}
	for _, g := range inv.GPUs {
		if g.UUID == "" {
			continue // lost before its identity could be read: nothing to key it by
		}
		base := DeviceSnapshot{
			GPUIndex: g.Index, GPUUUID: g.UUID, UUID: g.UUID, PCIBusID: g.PCIBusID,
			Minor: g.Minor, Model: g.Name, MemoryBytes: g.MemoryBytes,
			MIGEnabled: g.MIGEnabled, MIGPending: g.MIGPending,
			Health: g.Health, HealthReason: g.HealthReason,
		}
		keep(base)
		for _, m := range g.MIGDevices {
			md := base
			md.UUID, md.MIG, md.GIProfile = m.UUID, true, m.Profile
			md.GIID, md.CIID, md.MemoryBytes = m.GPUInstanceID, m.ComputeInstanceID, m.MemoryBytes
			md.PlacementStart, md.PlacementSize = m.PlacementStart, m.PlacementSize
			md.MIGEnabled, md.MIGPending = false, false
			md.Health, md.HealthReason = m.EffectiveHealth(&g)
			keep(md)
		}
	}
	// Devices that left (or changed into another MIG device) free their
	// GPM samples, or have their in-flight GPM call free them.
	for _, d := range s.devs {
		if byUUID[d.snap.UUID] == d {
			continue
		}
		if d.inflight[slotGPM] {
			d.gpm.dropped = true
			continue
		}
		s.freeLater(d.gpm.release())
	}
	s.devs, s.byUUID = devs, byUUID
}

// refreshAssignments lists the kubelet's assignments, bounded by
// PodResourcesTimeout. A failure keeps no stale assignments: devices lose
// their pod labels rather than keep wrong ones.
func (s *Sampler) refreshAssignments(ctx context.Context) {
	if s.attr.Pods == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PodResourcesTimeout)
	defer cancel()
	as, err := s.attr.Pods.List(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.podUp || s.attrErrs["podresources"] == 0 {
			s.log.Warn("pod resources unavailable, metrics go without pod labels", "err", err)
		}
		s.attrErrs["podresources"]++
		s.podUp, s.assigned = false, nil
		return
	}
	if !s.podUp {
		s.log.Info("pod resources available", "assignments", len(as))
	}
	s.podUp, s.assigned = true, as
}

// deviceName is dcgm-exporter's device label: nvidia<minor>.
func deviceName(minor int) string { return "nvidia" + strconv.Itoa(minor) }
