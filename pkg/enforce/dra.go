package enforce

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/usage"
)

// DRA is the enforcer's view of DRA claims (--kubelet-api dra): GPUs are
// allocated as devices of driver [dra.DriverName], which the kubelet
// reports per container in PodResources' dynamic_resources.
type DRA struct {
	// Resources lists device plugin assignments and claims' devices per
	// container in one call (*podresources.Client). Required; it is used
	// instead of [Config.Allocations]. Like Allocations.List, it must fail
	// rather than return nothing when the kubelet cannot be asked.
	Resources Resources
	// Prepared lists the claims the driver prepared on this node. It is
	// read only while the kubelet reports no device of the driver, to tell
	// a kubelet that does not fill dynamic_resources (feature gate
	// KubeletPodResourcesDynamicResources off, before 1.36) from a node
	// without claims. Nil means no claims are ever known.
	Prepared func() ([]ClaimRef, error)
}

// Resources lists the kubelet's assignments and claims' devices.
type Resources interface {
	ListResources(ctx context.Context) (podresources.Resources, error)
}

var _ Resources = (*podresources.Client)(nil)

// ClaimRef names a prepared ResourceClaim.
type ClaimRef struct {
	Namespace, Name string
	// Fractions are the claim's devices that are fractions of a whole
	// GPU, for GPU memory limits.
	Fractions []ClaimFraction
}

// ClaimFraction is one prepared fraction of a GPU.
type ClaimFraction struct {
	// Device is the device's name as published (gpu-<index>), ShareID
	// the allocation's share of it, as PodResources reports them.
	Device, ShareID string
	// MemoryBytes is the claim's consumed memory capacity: the request,
	// the soft limit.
	MemoryBytes uint64
	// LimitBytes is the hard limit from the claim's opaque configuration
	// (dra.GPUConfig memoryLimit); 0 means MemoryBytes, no borrowing.
	LimitBytes uint64
}

// CheckpointClaims is a [DRA].Prepared that reads the claims the DRA
// driver prepared from its checkpoint in dir, read-only
// ([dra.ReadPrepared]: the driver writes it meanwhile). A missing
// checkpoint is no claims.
func CheckpointClaims(dir string) func() ([]ClaimRef, error) {
	return func() ([]ClaimRef, error) {
		claims, err := dra.ReadPrepared(dir)
		if err != nil {
			return nil, err
		}
		var out []ClaimRef
		for _, c := range claims {
			ref := ClaimRef{Namespace: c.Namespace, Name: c.Name}
			for _, d := range c.Devices {
				if d.Fraction() && d.MemoryBytes > 0 {
					ref.Fractions = append(ref.Fractions, ClaimFraction{Device: d.Device.Name, ShareID: d.ShareID,
						MemoryBytes: d.MemoryBytes, LimitBytes: d.MemoryLimitBytes})
				}
			}
			out = append(out, ref)
		}
		return out, nil
	}
}

// gateGrace is how long the kubelet may lag behind the driver's prepare
// before its silence is reported as the feature gate being off.
const gateGrace = 5 * time.Second

// snapshot is what the kubelet allocated, at one time.
type snapshot struct {
	assignments []usage.Assignment
	claims      []podresources.ClaimDevice
	// standDown holds namespaces with claims of the driver that the
	// kubelet does not report: a container of theirs not filtered yet is
	// left unfiltered, since it may hold a GPU nobody can see.
	standDown map[string]bool
	// fractions are the prepared claims' fractions (DRA mode with memory
	// limits, when the kubelet reports shares of the driver's devices);
	// fractionsErr is why they could not be read.
	fractions    map[claimDevice]ClaimFraction
	fractionsErr error
}

// draState is what the enforcer knows about the kubelet's DRA reports.
type draState struct {
	silentSince time.Time // first pass with unreported claims; zero when none
	gateOff     string    // the /readyz note; "" while the kubelet is not known silent
	unknown     map[string]bool
}

// allocations asks the kubelet once. In DRA mode it also decides which
// namespaces stand down.
func (e *Enforcer) allocations(ctx context.Context) (snapshot, error) {
	if e.cfg.DRA == nil {
		as, err := e.cfg.Allocations.List(ctx)
		return snapshot{assignments: as}, err
	}
	r, err := e.cfg.DRA.Resources.ListResources(ctx)
	if err != nil {
		return snapshot{}, err
	}
	s := snapshot{assignments: r.Assignments, claims: r.Claims}
	reported := slices.ContainsFunc(r.Claims, func(c podresources.ClaimDevice) bool { return c.Driver == dra.DriverName })
	var prepared []ClaimRef
	if !reported && e.cfg.DRA.Prepared != nil {
		if prepared, err = e.cfg.DRA.Prepared(); err != nil {
			return snapshot{}, fmt.Errorf("enforce: prepared claims: %w", err)
		}
	}
	// Shares of the driver's devices: their memory is in the checkpoint,
	// read through the same Prepared. An unreadable checkpoint fails only
	// the memory limits (retried), not the device filters.
	shared := slices.ContainsFunc(r.Claims, func(c podresources.ClaimDevice) bool { return c.Driver == dra.DriverName && c.ShareID != "" })
	if e.cfg.MemoryLimits != nil && shared {
		if e.cfg.DRA.Prepared == nil {
			s.fractionsErr = errors.New("enforce: no prepared claims to read fractions' memory from")
		} else if claims, err := e.cfg.DRA.Prepared(); err != nil {
			s.fractionsErr = fmt.Errorf("enforce: prepared claims: %w", err)
		} else {
			s.fractions = preparedFractions(claims)
		}
	}
	for _, c := range prepared {
		if s.standDown == nil {
			s.standDown = map[string]bool{}
		}
		s.standDown[c.Namespace] = true
	}
	e.noteGate(reported, s.standDown)
	return s, nil
}

// noteGate logs (once) and shows in Status that the kubelet does not
// report claims' devices, once it kept silent about prepared claims for
// gateGrace; a reported device clears it.
func (e *Enforcer) noteGate(reported bool, standDown map[string]bool) {
	e.draMu.Lock()
	defer e.draMu.Unlock()
	st := &e.dra
	switch {
	case reported:
		if st.gateOff != "" {
			e.log.Info("kubelet reports DRA devices in pod resources, device isolation covers DRA pods again")
		}
		st.silentSince, st.gateOff = time.Time{}, ""
	case len(standDown) == 0:
		st.silentSince = time.Time{}
	case st.silentSince.IsZero():
		st.silentSince = time.Now()
	case st.gateOff == "" && time.Since(st.silentSince) >= gateGrace:
		ns := make([]string, 0, len(standDown))
		for n := range standDown {
			ns = append(ns, n)
		}
		sort.Strings(ns)
		st.gateOff = "the kubelet does not report DRA claims' devices in PodResources (feature gate KubeletPodResourcesDynamicResources off?): new containers in namespaces with " + dra.DriverName + " claims are not isolated"
		e.log.Warn("kubelet does not report DRA devices, device isolation stands down for containers in namespaces with claims",
			"driver", dra.DriverName, "namespaces", strings.Join(ns, ","),
			"fix", "enable the kubelet feature gate KubeletPodResourcesDynamicResources (on by default from Kubernetes 1.34)")
	}
}

// draIDs maps the driver's devices of one container (ctr non-empty) or
// of every container of the pod (ctr empty) to the GPU and MIG UUIDs
// they are: gpu-<index> (whole or a fraction: the same device) and
// gpu-<index>-mig-<profile>-<start> of a MIG device that exists. A name
// the inventory does not have is logged once and grants nothing.
func (e *Enforcer) draIDs(inv gpu.Inventory, s snapshot, ns, pod, ctr string) []string {
	var ids []string
	for _, c := range s.claims {
		if c.Driver != dra.DriverName || c.Namespace != ns || c.Pod != pod || (ctr != "" && c.Container != ctr) {
			continue
		}
		if uuid, ok := draDeviceUUID(inv, c.Device); ok {
			ids = append(ids, uuid)
			continue
		}
		e.draMu.Lock()
		if e.dra.unknown == nil {
			e.dra.unknown = map[string]bool{}
		}
		if !e.dra.unknown[c.Device] {
			e.dra.unknown[c.Device] = true
			e.log.Warn("DRA device not in the inventory, it grants no GPU", "device", c.Device, "pool", c.Pool,
				"claim", c.ClaimNamespace+"/"+c.ClaimName, "container", ns+"/"+pod+"/"+c.Container)
		}
		e.draMu.Unlock()
	}
	return ids
}

// draDeviceUUID is the UUID of the GPU or MIG device published as name.
func draDeviceUUID(inv gpu.Inventory, name string) (string, bool) {
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if g.UUID != "" && name == dra.GPUDeviceName(g.Index) {
			return g.UUID, true
		}
		for _, m := range g.MIGDevices {
			if m.UUID != "" && name == dra.MIGDeviceName(g.Index, m.Profile, m.PlacementStart) {
				return m.UUID, true
			}
		}
	}
	return "", false
}

// draNote is the DRA part of Status.
func (e *Enforcer) draNote() string {
	if e.cfg.DRA == nil || !e.cfg.Isolate {
		return ""
	}
	e.draMu.Lock()
	defer e.draMu.Unlock()
	if e.dra.gateOff != "" {
		return "; " + e.dra.gateOff
	}
	return ""
}
