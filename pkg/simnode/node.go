// Package simnode is gpud's simulated GPU node: an nvml.Interface built on
// go-nvml's mock servers (pkg/nvml/mock) that answers every call gpud makes
// as real hardware would. It fills in what the mocks lack: stable UUIDs, PCI
// bus IDs, NUMA and CPU affinity, NVLink and PCIe topology, MIG capacity and
// placement rules (an instance that does not fit fails with
// ERROR_INSUFFICIENT_RESOURCES), a pending MIG mode, the compute mode,
// running processes (MPS clients held to their pinned memory limit and
// active-thread percentage: see [Node.StartProcess]), per-cgroup GPU memory
// limits as drivers from r615 enforce them (SetMemoryLimits_v1, see
// [MemoryLimitsMinDriver]; a process's allocations past its cgroup's hard
// limit fail, and borrowers above their soft limit are evicted under
// memory pressure: [Node.Evictions]), telemetry that
// changes deterministically with time, Xid and ECC events, GPUs that fall
// off the bus, injectable NVML errors and latency, and an optional state
// file so the MIG layout, compute modes and memory limits survive a
// restart.
//
// Calls the simulator does not model return ERROR_NOT_SUPPORTED, as a driver
// does for a feature the GPU lacks.
package simnode

import (
	"crypto/sha1"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Node is a simulated GPU node. It implements nvml.Interface; the exported
// methods beyond it (InjectXid, AddProcess, ...) are the test and demo hooks
// that play the hardware's part. All methods are safe for concurrent use.
type Node struct {
	mock.Interface
	profile Profile
	name    string // the node name the UUIDs derive from: WithNodeName, else profile.Name
	model   model
	clock   func() time.Time
	start   time.Time

	mu        sync.Mutex // guards everything below and all device state
	devices   []*Device
	eventSets map[*eventSet]struct{}
	faults    map[string]*fault
	statePath string
	stateErr  error // of the latest state-file write
	closed    bool

	done      chan struct{} // closed by Close: ends stalled faults
	closeOnce sync.Once

	gpm gpmRegistry // GPM samples and counters (gpm.go), guarded by mu

	evictions []Eviction // processes evicted under memory pressure (evict.go), guarded by mu
}

var _ nvml.Interface = (*Node)(nil)

// Option configures a Node.
type Option func(*Node)

// WithClock sets the clock that drives telemetry (default time.Now).
func WithClock(now func() time.Time) Option { return func(n *Node) { n.clock = now } }

// WithStateFile keeps the MIG layout, compute modes and per-cgroup memory
// limits in path: loaded at New when the file exists, rewritten after every
// change, as the first two survive a driver reload on real hardware and the
// limits last as long as their cgroups. New writes it once, so a path that
// cannot be written fails there; later write errors are reported by
// [Node.StateErr].
func WithStateFile(path string) Option { return func(n *Node) { n.statePath = path } }

// WithNodeName names the node the simulated GPUs are in (default: the
// profile's name). Their GPU and MIG UUIDs derive from it, as a real GPU's
// UUID is unique across a cluster: two nodes of one profile with different
// names share no UUID, and one name gets the same UUIDs on every start. It
// must be a Kubernetes node name; New refuses another.
func WithNodeName(name string) Option { return func(n *Node) { n.name = name } }

// New builds a simulated node from a profile (see LoadProfile).
func New(p Profile, opts ...Option) (*Node, error) {
	p = p.withDefaults()
	if err := p.validate(nil); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrBadProfile, p.Name, err)
	}
	n := &Node{
		profile:   p,
		name:      p.Name,
		model:     models[p.Model],
		clock:     time.Now,
		eventSets: map[*eventSet]struct{}{},
		faults:    map[string]*fault{},
		done:      make(chan struct{}),
	}
	for _, o := range opts {
		o(n)
	}
	if _, err := driverBranch(n.profile.DriverVersion); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrBadProfile, p.Name, err)
	}
	if msgs := validation.IsDNS1123Subdomain(n.name); len(msgs) > 0 {
		return nil, fmt.Errorf("%w %s: node name %q is not a Kubernetes node name: %s", ErrBadProfile, p.Name, n.name, strings.Join(msgs, "; "))
	}
	n.start = n.clock()
	for i := range p.Count {
		n.devices = append(n.devices, newDevice(n, i))
	}
	if n.statePath != "" {
		// The node owns its state file's directory (make run's .run/ on a
		// fresh clone): create it, private, as the MIG journal's is.
		if err := os.MkdirAll(filepath.Dir(n.statePath), 0o700); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStateFile, err)
		}
		if err := n.loadState(); err != nil {
			return nil, err
		}
		n.removeStaleTemps()
		n.mu.Lock()
		err := n.saveStateLocked()
		n.mu.Unlock()
		if err != nil {
			return nil, err // ErrStateFile names the package
		}
	}
	n.setFuncs()
	return n, nil
}

// NewBuiltin is New(LoadProfile(name)) for a built-in name; it panics on an
// unknown name and is meant for tests.
func NewBuiltin(name string, opts ...Option) *Node {
	p, ok := builtins[name]
	if !ok {
		panic("simnode: unknown built-in node " + name)
	}
	n, err := New(p, opts...)
	if err != nil {
		panic(err)
	}
	return n
}

// Close ends the node's life as a process exit would: calls stalled by an
// injected fault's Delay return ERROR_UNINITIALIZED at once (as later
// stalled calls do), and the state file is no longer written. The node
// still answers from memory. Close is idempotent and safe to call from a
// test's Cleanup.
func (n *Node) Close() {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closed = true
		n.mu.Unlock()
		close(n.done)
	})
}

// Profile returns the profile the node was built from.
func (n *Node) Profile() Profile { return n.profile }

// Name returns the node's name: the one given to [WithNodeName], else the
// profile's.
func (n *Node) Name() string { return n.name }

// Device returns the simulated GPU at index i.
func (n *Node) Device(i int) *Device { return n.devices[i] }

func (n *Node) setFuncs() {
	n.InitFunc = func() nvml.Return { return nvml.SUCCESS }
	n.ShutdownFunc = func() nvml.Return { return nvml.SUCCESS }
	n.ErrorStringFunc = func(r nvml.Return) string { return r.Error() }
	n.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return n.profile.DriverVersion, nvml.SUCCESS }
	n.SystemGetNVMLVersionFunc = func() (string, nvml.Return) { return "12." + n.profile.DriverVersion, nvml.SUCCESS }
	n.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return n.profile.CUDADriverVersion, nvml.SUCCESS }
	n.DeviceGetCountFunc = func() (int, nvml.Return) { return len(n.devices), nvml.SUCCESS }
	n.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(n.devices) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return n.devices[i], nvml.SUCCESS
	}
	n.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, d := range n.devices {
			if d.uuid == uuid {
				return d, nvml.SUCCESS
			}
			for _, h := range d.migHandlesLocked() {
				if h.ci.uuid == uuid {
					return h, nvml.SUCCESS
				}
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	n.DeviceGetHandleByPciBusIdFunc = func(busID string) (nvml.Device, nvml.Return) {
		for _, d := range n.devices {
			if d.busID == busID || d.busID[4:] == busID {
				return d, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	n.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return n.newEventSet(), nvml.SUCCESS }
	n.DeviceSetMemoryLimits_v1Func = func(dev nvml.Device, namespace string, soft, hard uint64) nvml.Return {
		if dev == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return dev.SetMemoryLimits_v1(namespace, soft, hard)
	}
	n.DeviceGetMemoryLimits_v1Func = func(dev nvml.Device, namespace string) (nvml.MemoryLimits_v1, nvml.Return) {
		if dev == nil {
			return nvml.MemoryLimits_v1{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return dev.GetMemoryLimits_v1(namespace)
	}
	n.setGPMFuncs()
	fillUnsupported(&n.Interface)
}

// elapsed is the simulated time since the node started.
func (n *Node) elapsed() time.Duration { return n.clock().Sub(n.start) }

// uuid derives the UUID of the node's GPU (ids: its index) or MIG device
// (ids: GPU index, GPU instance ID, compute instance ID) from the node's
// name and profile, so it is the same on every start and differs between
// nodes. A node named after its profile (the default) keeps the UUIDs of
// gpud versions before names counted, so its state files and DRA
// checkpoints still name its GPUs; any other name is hashed with the
// profile's, NUL-separated (neither name can hold a NUL), so no other name,
// profile or index gives the same input.
func (n *Node) uuid(prefix string, ids ...int) string {
	if n.name == n.profile.Name {
		parts := []any{n.profile.Name}
		for _, id := range ids {
			parts = append(parts, id)
		}
		return stableUUID(prefix, parts...)
	}
	key := []byte(n.name + "\x00" + n.profile.Name)
	for _, id := range ids {
		key = fmt.Appendf(key, "\x00%d", id)
	}
	return formatUUID(prefix, sha1.Sum(key))
}

// stableUUID derives a UUID-formatted string from parts, so a node's UUIDs are
// the same on every start.
func stableUUID(prefix string, parts ...any) string {
	return formatUUID(prefix, sha1.Sum(fmt.Append(nil, parts...)))
}

// formatUUID formats the first 16 bytes of a hash as NVML does a UUID.
func formatUUID(prefix string, h [sha1.Size]byte) string {
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", prefix, h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
