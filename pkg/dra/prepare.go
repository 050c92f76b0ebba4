package dra

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpud/gpud/pkg/devnodes"
	"github.com/gpud/gpud/pkg/dra/prepared"
	"log/slog"
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// MaxClaimsPerCall bounds the claims one prepare or unprepare call may
// carry; the kubelet sends one pod's claims.
const MaxClaimsPerCall = 128

// CreatedMIG is a MIG device [MIGManager.Create] made (or
// [MIGManager.Lookup] found).
type CreatedMIG struct {
	UUID string
	// GIID and CIID are its GPU and compute instance IDs (for the
	// /dev/nvidia-caps nodes).
	GIID, CIID int
	// ModeEnabled is true when Create turned the GPU's MIG mode on.
	ModeEnabled bool
}

// MIGLookup is what [MIGManager.Lookup] finds at a placement now.
type MIGLookup struct {
	// Device is the complete MIG device there; its UUID is empty when
	// there is none.
	Device CreatedMIG
	// ModeOn is the GPU's current MIG mode.
	ModeOn bool
}

// MIGManager creates and destroys MIG devices for claims. The wiring
// implements it with pkg/mig's slice manager (applier, journal and
// rollback). Create makes a GPU instance of profile at placementStart on
// the GPU and its one full compute instance, turning MIG mode on first if
// needed (and saying so); it leaves nothing behind when it fails. Lookup
// reads the hardware, not a published table that may lag it. Destroy
// removes one such device from its GPU (a device that no longer exists is
// not an error); with restoreMode it turns MIG mode off when no slice is
// left, and it reports whether MIG mode is off when it returns.
type MIGManager interface {
	Create(ctx context.Context, parentUUID, profile string, placementStart int) (CreatedMIG, error)
	Lookup(ctx context.Context, parentUUID, profile string, placementStart int) (MIGLookup, error)
	Destroy(ctx context.Context, parentUUID, migUUID string, restoreMode bool) (modeOff bool, err error)
}

// The steps of prepare and unprepare after which a crash leaves distinct
// state on disk and on the GPUs; the fault-injection tests kill the agent
// at each (see Preparer.atStep).
const (
	stepPlanned     = "prepare: entry saved as Preparing"
	stepCreate      = "prepare: MIG device marked Creating"
	stepCreated     = "prepare: MIG device created, not recorded"
	stepRecorded    = "prepare: MIG device recorded"
	stepSpecWritten = "prepare: CDI spec written"
	stepPrepared    = "prepare: entry saved as Prepared"
	stepDestroy     = "unprepare: before destroying a MIG device"
	stepDestroyed   = "unprepare: MIG device destroyed, not recorded"
	stepSpecRemoved = "unprepare: CDI spec removed"
	stepUnprepared  = "unprepare: entry removed"
)

// faultSteps lists the steps in the order one prepare and unprepare of a
// dynamic MIG claim reach them.
var faultSteps = []string{stepPlanned, stepCreate, stepCreated, stepRecorded, stepSpecWritten, stepPrepared,
	stepDestroy, stepDestroyed, stepSpecRemoved, stepUnprepared}

// PreparerConfig configures a [Preparer].
type PreparerConfig struct {
	// NodeName is this node and its pool. Required.
	NodeName string
	// StateDir holds the checkpoint (the plugin data directory). Required.
	StateDir string
	// CDIDir receives one CDI spec per prepared claim. Required.
	CDIDir string
	// Devices returns the devices published now (from [Build]). Required.
	Devices func() map[string]DeviceRef
	// MIG creates dynamic MIG devices; nil makes their prepare fail.
	MIG MIGManager
	// MPSRoot is where the GPUs' MPS daemons keep their pipe directories
	// (the agent's --mps-root); a fraction's container mounts its GPU's.
	// Empty: fractions get their CUDA_MPS_* limits as environment only.
	MPSRoot string
	// DeviceFiles says where the device files a claim's CDI spec names are
	// on the host; the zero value is a GPU node's /dev.
	DeviceFiles devnodes.Files
	// DriverEdits are the NVIDIA driver's user-space files (libraries,
	// binaries, the toolkit's hooks; pkg/driveredits), added at the top
	// of every claim's CDI spec so a container gets them as from NVIDIA's
	// DRA driver. The zero value adds nothing: the container then needs a
	// runtime that injects the driver (the nvidia RuntimeClass).
	DriverEdits cdispec.ContainerEdits
	// Log may be nil.
	Log *slog.Logger
}

// Preparer prepares and unprepares claims allocated from this node's pool,
// recording each in a checkpoint so prepare is idempotent and unprepare
// works after a restart. It is safe for concurrent use: calls for one
// claim are serialized (a per-claim lock), so its checkpoint entry, CDI
// spec and MIG devices agree after every interleaving of prepares and
// unprepares; calls for different claims run in parallel, and only their
// checkpoint writes are serialized.
type Preparer struct {
	cfg PreparerConfig

	mu     sync.Mutex // guards cp and claims; never held across a MIG call
	cp     prepared.Checkpoint
	claims map[types.UID]*claimLock

	// atStep, when set (tests only), is called at each step of prepare
	// and unprepare: the fault-injection test copies the state dir, the
	// CDI dir and the node's state there, which is what a SIGKILL at that
	// step leaves, and restarts an agent on the copy.
	atStep func(step string)
}

// claimLock serializes the calls for one claim; refs counts the calls
// holding or waiting for it, so it is dropped when none does.
type claimLock struct {
	mu   sync.Mutex
	refs int
}

// NewPreparer checks cfg, loads the checkpoint and removes the temp files
// writes a kill cut short left in the state and CDI dirs.
func NewPreparer(cfg PreparerConfig) (*Preparer, error) {
	if cfg.NodeName == "" || cfg.StateDir == "" || cfg.CDIDir == "" || cfg.Devices == nil {
		return nil, errors.New("dra: preparer needs NodeName, StateDir, CDIDir and Devices")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cp, err := prepared.Read(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	if err := removeStaleCDITemps(cfg.CDIDir); err != nil {
		return nil, err
	}
	return &Preparer{cfg: cfg, cp: cp, claims: map[types.UID]*claimLock{}}, nil
}

// lockClaim takes the claim's lock and returns its release.
func (p *Preparer) lockClaim(uid types.UID) func() {
	p.mu.Lock()
	l := p.claims[uid]
	if l == nil {
		l = &claimLock{}
		p.claims[uid] = l
	}
	l.refs++
	p.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		p.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(p.claims, uid)
		}
		p.mu.Unlock()
	}
}

func (p *Preparer) step(name string) {
	if p.atStep != nil {
		p.atStep(name)
	}
}

// entry returns the claim's checkpoint entry.
func (p *Preparer) entry(uid types.UID) (PreparedClaim, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.cp.Claims[uid]
	return c, ok
}

// Prepared returns a copy of the prepared (and half-prepared) claims.
func (p *Preparer) Prepared() map[types.UID]PreparedClaim {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[types.UID]PreparedClaim, len(p.cp.Claims))
	for uid, c := range p.cp.Claims {
		c.Devices = slices.Clone(c.Devices)
		out[uid] = c
	}
	return out
}

// Prepare prepares each claim: the result has one entry per claim, with
// the CDI device IDs of its devices of this driver or the error that
// stopped it. A claim prepared before gets the same result again.
func (p *Preparer) Prepare(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	if len(claims) > MaxClaimsPerCall {
		return nil, fmt.Errorf("dra: %d claims in one call, at most %d", len(claims), MaxClaimsPerCall)
	}
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		if c == nil {
			continue
		}
		devs, err := p.prepareLocked(ctx, c)
		if err != nil {
			p.cfg.Log.Warn("claim prepare failed", "claim", c.Namespace+"/"+c.Name, "claim_uid", c.UID, "err", err)
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devs}
	}
	return out, nil
}

func (p *Preparer) prepareLocked(ctx context.Context, c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	if c.UID == "" {
		return nil, fmt.Errorf("dra: claim %s/%s has no UID", c.Namespace, c.Name)
	}
	defer p.lockClaim(c.UID)()
	return p.prepareClaim(ctx, c)
}

// prepareClaim prepares one claim; the caller holds its lock.
func (p *Preparer) prepareClaim(ctx context.Context, c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	id := c.Namespace + "/" + c.Name
	prev, had := p.entry(c.UID)
	if had && prev.State == prepared.StatePrepared {
		return p.result(prev), nil
	}
	planned, err := p.plan(c, prev)
	if err != nil {
		return nil, fmt.Errorf("dra: claim %s: %w", id, err)
	}
	entry := PreparedClaim{Namespace: c.Namespace, Name: c.Name, State: prepared.StatePreparing, Devices: planned}
	// The conflict check and the entry's save are one step, so two claims
	// cannot both take one device.
	p.mu.Lock()
	err = p.checkConflicts(c.UID, planned)
	if err == nil {
		err = p.saveLocked(c.UID, entry)
	}
	p.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("dra: claim %s: %w", id, err)
	}
	p.step(stepPlanned)
	if err := p.deliver(ctx, c.UID, &entry); err != nil {
		if rbErr := p.undo(ctx, c.UID, entry); rbErr != nil {
			return nil, fmt.Errorf("dra: claim %s: %w; cleanup failed too (unprepare retries it): %w", id, err, rbErr)
		}
		return nil, fmt.Errorf("dra: claim %s: %w", id, err)
	}
	p.step(stepPrepared)
	p.cfg.Log.Info("claim prepared", "claim", id, "claim_uid", c.UID, "devices", len(entry.Devices))
	return p.result(entry), nil
}

// plan resolves the claim's allocation into devices of this node, with
// the memory limits of the claim's opaque configuration ([GPUConfig]),
// checks them (each alone, then together: [checkClaimFits]), and carries over
// what an interrupted earlier prepare created.
//
// The table may lag the hardware (it is republished after the MIG service
// rediscovers), so whether a MIG device exists is decided again in
// [Preparer.deliver] from the hardware.
func (p *Preparer) plan(c *resourceapi.ResourceClaim, prev PreparedClaim) ([]PreparedDevice, error) {
	if c.Status.Allocation == nil {
		return nil, errors.New("not allocated")
	}
	results := c.Status.Allocation.Devices.Results
	if len(results) > resourceapi.AllocationResultsMaxSize {
		return nil, fmt.Errorf("%d allocation results, at most %d", len(results), resourceapi.AllocationResultsMaxSize)
	}
	configs, err := claimConfigs(c.Status.Allocation)
	if err != nil {
		return nil, err
	}
	table := p.cfg.Devices()
	var out []PreparedDevice
	for _, r := range results {
		if r.Driver != DriverName {
			continue
		}
		if r.Pool != p.cfg.NodeName {
			return nil, fmt.Errorf("%w: device %q of pool %q (this node is %q)", ErrUnknownDevice, r.Device, r.Pool, p.cfg.NodeName)
		}
		d := PreparedDevice{Requests: []string{r.Request}}
		if r.ShareID != nil {
			d.ShareID = string(*r.ShareID)
			if err := parser.ValidateDeviceName(d.ShareID); err != nil || len(d.ShareID) > 64 {
				return nil, fmt.Errorf("device %q: bad share ID %q", r.Device, d.ShareID)
			}
		}
		ref, ok := table[r.Device]
		var before *PreparedDevice
		for i := range prev.Devices {
			if prev.Devices[i].Device.Name == r.Device && prev.Devices[i].ShareID == d.ShareID {
				before = &prev.Devices[i]
			}
		}
		switch {
		case before != nil && before.Created && (before.Device.MIGUUID != "" || before.Creating):
			// An earlier attempt created it, or crashed creating it: then
			// it exists if the inventory shows it.
			d.Device, d.Created, d.Creating, d.EnablesMIGMode = before.Device, true, before.Creating, before.EnablesMIGMode
		case !ok:
			return nil, fmt.Errorf("%w: device %q of pool %q", ErrUnknownDevice, r.Device, r.Pool)
		default:
			d.Device, d.Created = ref, ref.Dynamic()
		}
		if d.Device.Type == TypeGPU {
			mem, cores, err := consumed(r.ConsumedCapacity, d.Device)
			if err != nil {
				return nil, fmt.Errorf("device %q: %w", r.Device, err)
			}
			d.MemoryBytes, d.CoresPercent = mem, cores
		}
		if d.MemoryLimitBytes, err = memoryLimit(configs, r.Request, d); err != nil {
			return nil, err
		}
		if j := slices.IndexFunc(out, func(o PreparedDevice) bool { return o.Device.Name == d.Device.Name && o.ShareID == d.ShareID }); j >= 0 {
			if out[j].MemoryLimitBytes != d.MemoryLimitBytes {
				return nil, fmt.Errorf("%w: device %q serves requests %s and %q, whose memory limits differ (%d and %d bytes)",
					ErrBadConfig, d.Device.Name, strings.Join(out[j].Requests, ","), r.Request, out[j].MemoryLimitBytes, d.MemoryLimitBytes)
			}
			out[j].Requests = append(out[j].Requests, r.Request)
			continue
		}
		out = append(out, d)
	}
	if err := checkClaimFits(out); err != nil {
		return nil, err
	}
	return out, nil
}

// consumed reads and bounds the capacity an allocation of a whole GPU
// takes: memory defaults to all of it, cores (percent) to 0, no limit.
func consumed(cc map[resourceapi.QualifiedName]resource.Quantity, ref DeviceRef) (memBytes uint64, cores int, err error) {
	memBytes = ref.MemoryBytes
	for name, q := range cc {
		switch name {
		case CapacityMemory, DriverName + "/" + CapacityMemory:
			v, ok := q.AsInt64()
			if !ok || v <= 0 || uint64(v) > ref.MemoryBytes {
				return 0, 0, fmt.Errorf("consumed memory %s outside 1..%d bytes", q.String(), ref.MemoryBytes)
			}
			memBytes = uint64(v)
		case CapacityCores, DriverName + "/" + CapacityCores:
			v, ok := q.AsInt64()
			if !ok || v < 0 || v > 100 {
				return 0, 0, fmt.Errorf("consumed cores %s outside 0..100", q.String())
			}
			cores = int(v)
		default:
			return 0, 0, fmt.Errorf("unknown consumed capacity %q", name)
		}
	}
	if !ref.Shareable && (memBytes != ref.MemoryBytes || (cores != 0 && cores != 100)) {
		return 0, 0, errors.New("a fraction of a GPU that is exclusive-only")
	}
	return memBytes, cores, nil
}

// checkConflicts is the last line of defense against two claims on one
// device: an exclusive device (or whole GPU) serves one claim; fractions of
// a GPU together fit in it. The caller holds p.mu.
func (p *Preparer) checkConflicts(uid types.UID, devs []PreparedDevice) error {
	for _, d := range devs {
		mem, cores := d.MemoryBytes, d.CoresPercent
		exclusive := !d.Fraction()
		for other, c := range p.cp.Claims {
			if other == uid {
				continue
			}
			for _, o := range c.Devices {
				if o.Device.Name != d.Device.Name {
					continue
				}
				if exclusive || !o.Fraction() {
					return fmt.Errorf("%w: device %q is prepared for claim %s/%s", ErrInUse, d.Device.Name, c.Namespace, c.Name)
				}
				mem += o.MemoryBytes
				cores += o.CoresPercent
			}
		}
		if d.Fraction() && (mem > d.Device.MemoryBytes || cores > 100) {
			return fmt.Errorf("%w: fractions of device %q would take %d of %d bytes and %d%% of its cores", ErrInUse, d.Device.Name, mem, d.Device.MemoryBytes, cores)
		}
	}
	return nil
}

// deliver creates the claim's dynamic MIG devices and writes its CDI spec,
// recording progress in the checkpoint after each device. Whether a MIG
// device exists is read from the hardware ([MIGManager.Lookup]), after
// the entry was saved: from then on no other claim touches the device.
func (p *Preparer) deliver(ctx context.Context, uid types.UID, entry *PreparedClaim) error {
	for i := range entry.Devices {
		d := &entry.Devices[i]
		if d.Device.Type != TypeMIG {
			continue
		}
		if p.cfg.MIG == nil {
			if d.Created && d.Device.MIGUUID == "" {
				return fmt.Errorf("device %q: no MIG manager to create %s", d.Device.Name, d.Device.Profile)
			}
			continue
		}
		lk, err := p.cfg.MIG.Lookup(ctx, d.Device.GPUUUID, d.Device.Profile, d.Device.Placement.Start)
		if err != nil {
			return fmt.Errorf("device %q: look up MIG device: %w", d.Device.Name, err)
		}
		if lk.Device.UUID != "" {
			// It exists: ours from an interrupted earlier attempt
			// (Creating, or recorded), or one this claim did not make.
			adopt := d.Created && (d.Creating || d.Device.MIGUUID != "")
			d.Device.MIGUUID, d.Device.GIID, d.Device.CIID = lk.Device.UUID, lk.Device.GIID, lk.Device.CIID
			d.Created, d.Creating = adopt, false
			if !adopt {
				d.EnablesMIGMode = false
			}
			if err := p.save(uid, *entry); err != nil {
				return err
			}
			continue
		}
		if err := p.create(ctx, uid, entry, d, lk.ModeOn); err != nil {
			return err
		}
	}
	spec, err := buildCDISpec(uid, entry.Devices, p.cfg.MPSRoot, p.cfg.DeviceFiles, p.cfg.DriverEdits)
	if err != nil {
		return err
	}
	if err := mkMPSPipeDirs(p.cfg.MPSRoot, entry.Devices); err != nil {
		return err
	}
	if err := writeCDISpec(p.cfg.CDIDir, uid, spec); err != nil {
		return err
	}
	p.step(stepSpecWritten)
	for i := range entry.Devices {
		entry.Devices[i].CDIDeviceIDs = []string{CDIKind + "=" + cdiDeviceName(uid, entry.Devices[i])}
	}
	entry.State = prepared.StatePrepared
	return p.save(uid, *entry)
}

// create makes one MIG device of the claim. Before Create it records the
// device as Creating and, when the GPU's MIG mode is off, the claim as the
// GPU's MIG mode owner, so after a crash anywhere in Create a restarted
// agent finds the device (or its absence) and still restores the GPU's
// mode.
func (p *Preparer) create(ctx context.Context, uid types.UID, entry *PreparedClaim, d *PreparedDevice, modeOn bool) error {
	gpuUUID := d.Device.GPUUUID
	d.Device.MIGUUID, d.Device.GIID, d.Device.CIID = "", 0, 0
	d.Created, d.Creating, d.EnablesMIGMode = true, true, !modeOn
	p.mu.Lock()
	_, owned := p.cp.MIGModeOwners[gpuUUID]
	intent := d.EnablesMIGMode && !owned
	if intent {
		p.cp.MIGModeOwners[gpuUUID] = uid
	}
	err := p.saveLocked(uid, *entry)
	if err != nil && intent {
		delete(p.cp.MIGModeOwners, gpuUUID) // not on disk either
	}
	p.mu.Unlock()
	if err != nil {
		d.Creating = false
		return err
	}
	p.step(stepCreate)
	m, err := p.cfg.MIG.Create(ctx, gpuUUID, d.Device.Profile, d.Device.Placement.Start)
	p.step(stepCreated)
	d.Creating = false // a failed Create leaves nothing
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err == nil && m.ModeEnabled:
		p.cp.MIGModeOwners[gpuUUID] = uid
	case intent && p.cp.MIGModeOwners[gpuUUID] == uid:
		// This device was to turn MIG mode on but did not (it was on
		// after all, or Create failed and rolled back).
		delete(p.cp.MIGModeOwners, gpuUUID)
	}
	if err != nil {
		d.Created = false
		return fmt.Errorf("create MIG device %q: %w", d.Device.Name, err)
	}
	d.EnablesMIGMode = m.ModeEnabled
	d.Device.MIGUUID, d.Device.GIID, d.Device.CIID = m.UUID, m.GIID, m.CIID
	if err := p.saveLocked(uid, *entry); err != nil {
		return err
	}
	p.step(stepRecorded)
	return nil
}

// undo destroys what the claim's prepare created, removes its CDI spec and
// forgets it; what cannot be destroyed stays in the checkpoint. A GPU
// whose MIG mode gpud turned on (its MIG mode owner in the checkpoint)
// goes back to MIG mode off when its last slice goes.
func (p *Preparer) undo(ctx context.Context, uid types.UID, entry PreparedClaim) error {
	var errs []error
	kept := entry.Devices[:0:0]
	for _, d := range entry.Devices {
		if !d.Created {
			continue
		}
		if p.cfg.MIG == nil {
			if d.Device.MIGUUID != "" || d.Creating {
				errs = append(errs, fmt.Errorf("device %q: no MIG manager to destroy %s", d.Device.Name, d.Device.MIGUUID))
				kept = append(kept, d)
			}
			continue
		}
		migUUID := d.Device.MIGUUID
		if migUUID == "" && d.Creating {
			// Created before a crash recorded it, or not: the hardware says.
			lk, err := p.cfg.MIG.Lookup(ctx, d.Device.GPUUUID, d.Device.Profile, d.Device.Placement.Start)
			if err != nil {
				errs = append(errs, fmt.Errorf("device %q: look up MIG device: %w", d.Device.Name, err))
				kept = append(kept, d)
				continue
			}
			migUUID = lk.Device.UUID
		}
		p.mu.Lock()
		owner, restore := p.cp.MIGModeOwners[d.Device.GPUUUID]
		p.mu.Unlock()
		if migUUID == "" && !restore {
			continue // never created
		}
		p.step(stepDestroy)
		off, err := p.cfg.MIG.Destroy(ctx, d.Device.GPUUUID, migUUID, restore)
		p.step(stepDestroyed)
		if err != nil {
			errs = append(errs, fmt.Errorf("destroy MIG device %q (%s): %w", d.Device.Name, migUUID, err))
			kept = append(kept, d)
			continue
		}
		if off && restore {
			p.mu.Lock()
			if p.cp.MIGModeOwners[d.Device.GPUUUID] == owner { // no other claim took it on meanwhile
				delete(p.cp.MIGModeOwners, d.Device.GPUUUID)
			}
			p.mu.Unlock()
		}
	}
	if len(errs) > 0 {
		entry.Devices, entry.State = kept, prepared.StatePreparing
		if err := p.save(uid, entry); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	if err := removeCDISpec(p.cfg.CDIDir, uid); err != nil {
		return err
	}
	p.step(stepSpecRemoved)
	if err := p.forget(uid); err != nil {
		return err
	}
	p.step(stepUnprepared)
	return nil
}

// Unprepare undoes each claim's prepare; a claim not prepared here is
// fine. The result has one entry per claim.
func (p *Preparer) Unprepare(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	if len(claims) > MaxClaimsPerCall {
		return nil, fmt.Errorf("dra: %d claims in one call, at most %d", len(claims), MaxClaimsPerCall)
	}
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		if err := p.unprepareLocked(ctx, c); err != nil {
			out[c.UID] = fmt.Errorf("dra: unprepare claim %s/%s: %w", c.Namespace, c.Name, err)
			p.cfg.Log.Warn("claim unprepare failed", "claim", c.Namespace+"/"+c.Name, "claim_uid", c.UID, "err", err)
			continue
		}
		out[c.UID] = nil
	}
	return out, nil
}

func (p *Preparer) unprepareLocked(ctx context.Context, c kubeletplugin.NamespacedObject) error {
	defer p.lockClaim(c.UID)()
	entry, ok := p.entry(c.UID)
	if !ok {
		return nil
	}
	if err := p.undo(ctx, c.UID, entry); err != nil {
		return err
	}
	p.cfg.Log.Info("claim unprepared", "claim", c.Namespace+"/"+c.Name, "claim_uid", c.UID)
	return nil
}

// save records a claim's entry in the checkpoint on disk.
func (p *Preparer) save(uid types.UID, entry PreparedClaim) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.saveLocked(uid, entry)
}

// saveLocked records a claim's entry in the checkpoint on disk; the caller
// holds p.mu.
func (p *Preparer) saveLocked(uid types.UID, entry PreparedClaim) error {
	old, had := p.cp.Claims[uid]
	p.cp.Claims[uid] = entry
	if err := prepared.Write(p.cfg.StateDir, p.cp); err != nil {
		if had {
			p.cp.Claims[uid] = old
		} else {
			delete(p.cp.Claims, uid)
		}
		return err
	}
	return nil
}

// forget removes a claim from the checkpoint on disk.
func (p *Preparer) forget(uid types.UID) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.cp.Claims[uid]
	delete(p.cp.Claims, uid)
	if err := prepared.Write(p.cfg.StateDir, p.cp); err != nil {
		p.cp.Claims[uid] = old
		return err
	}
	return nil
}

func (p *Preparer) result(c PreparedClaim) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(c.Devices))
	for _, d := range c.Devices {
		kd := kubeletplugin.Device{Requests: slices.Clone(d.Requests), PoolName: p.cfg.NodeName,
			DeviceName: d.Device.Name, CDIDeviceIDs: slices.Clone(d.CDIDeviceIDs)}
		if d.ShareID != "" {
			s := types.UID(d.ShareID)
			kd.ShareID = &s
		}
		out = append(out, kd)
	}
	return out
}
