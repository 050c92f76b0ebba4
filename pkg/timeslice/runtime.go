package timeslice

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/usage"
)

// ErrRefused is wrapped when a sharing change would take away an allocated
// replica or change its limits under a running pod.
var ErrRefused = errors.New("timeslice: sharing change refused")

// RefusedError lists every allocated replica a change would take away.
type RefusedError struct {
	Reasons []string
}

func (e *RefusedError) Error() string {
	return "timeslice: sharing change refused: " + strings.Join(e.Reasons, "; ") +
		"; wait for those pods to finish or change only devices nobody holds"
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// CheckChange reports whether going from old to next keeps every allocated
// replica: allocated maps replica IDs (`<uuid>::<n>`) to who holds them
// ("namespace/pod"). A replica is kept when its device is still shared,
// still has share n, and share n's limits are no tighter. Devices are resolved
// through inv (for GPU index keys and memory).
func CheckChange(old, next Config, inv gpu.Inventory, allocated map[string]string) error {
	if err := next.ValidateFor(inv); err != nil {
		return err
	}
	ids := make([]string, 0, len(allocated))
	for id := range allocated {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var reasons []string
	for _, id := range ids {
		uuid, n, ok := ParseReplicaID(id)
		if !ok {
			continue
		}
		index, memMiB := DeviceOf(inv, uuid)
		holder := allocated[id]
		was, wasShared := old.For(uuid, index)
		now, shared := next.For(uuid, index)
		switch {
		case !wasShared:
			continue
		case !shared:
			reasons = append(reasons, fmt.Sprintf("%s is allocated to %s and the change stops sharing %s", id, holder, uuid))
		case n >= now.Count():
			reasons = append(reasons, fmt.Sprintf("%s is allocated to %s and the change leaves %s %d shares", id, holder, uuid, now.Count()))
		default:
			a, _ := was.ShareOf(n, memMiB)
			b, _ := now.ShareOf(n, memMiB)
			// Equal replicas' compute split follows the count and only
			// applies to new containers; explicit shares keep theirs.
			explicit := len(was.Shares) > 0 && len(now.Shares) > 0
			if tighter(a.MemoryMiB, b.MemoryMiB) || tighter(a.LimitMiB(), b.LimitMiB()) ||
				(explicit && tighter(uint64(a.ComputePercent), uint64(b.ComputePercent))) {
				reasons = append(reasons, fmt.Sprintf("%s is allocated to %s and the change shrinks its limits (%s -> %s)", id, holder, a, b))
			}
		}
	}
	if len(reasons) > 0 {
		return &RefusedError{Reasons: reasons}
	}
	return nil
}

func (sh Share) String() string {
	mem, cmp := "no memory limit", "all compute"
	if sh.MemoryMiB > 0 {
		mem = fmt.Sprintf("%d MiB", sh.MemoryMiB)
	}
	if sh.MemoryLimitMiB > sh.MemoryMiB {
		mem += fmt.Sprintf(" (limit %d MiB)", sh.MemoryLimitMiB)
	}
	if sh.ComputePercent > 0 {
		cmp = fmt.Sprintf("%d%% compute", sh.ComputePercent)
	}
	return mem + ", " + cmp
}

// tighter reports whether limit b is stricter than a (0 means no limit).
func tighter(a, b uint64) bool { return b != 0 && (a == 0 || b < a) }

// DeviceOf finds a GPU or MIG device's index (-1 for MIG) and memory in
// MiB; 0 MiB when inv does not list uuid.
func DeviceOf(inv gpu.Inventory, uuid string) (int, uint64) {
	for _, g := range inv.GPUs {
		if g.UUID == uuid {
			return g.Index, g.MemoryBytes >> 20
		}
		for _, m := range g.MIGDevices {
			if m.UUID == uuid {
				return -1, m.MemoryBytes >> 20
			}
		}
	}
	return -1, 0
}

// Store holds the node's sharing config while the agent runs and tells
// watchers when it changes. It is safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	cfg     Config
	changed chan struct{}
}

// NewStore returns a store holding cfg.
func NewStore(cfg Config) *Store { return &Store{cfg: cfg, changed: make(chan struct{})} }

// Get returns the current config.
func (s *Store) Get() Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// Changed returns a channel closed at the next change.
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Update replaces the config with next when [CheckChange] allows it, and
// reports whether anything changed. A refused change leaves the store as
// it was and returns an error wrapping ErrRefused (or ErrInvalid).
func (s *Store) Update(next Config, inv gpu.Inventory, allocated map[string]string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := CheckChange(s.cfg, next, inv, allocated); err != nil {
		return false, err
	}
	if reflect.DeepEqual(s.cfg, next) {
		return false, nil
	}
	s.cfg = next
	close(s.changed)
	s.changed = make(chan struct{})
	return true, nil
}

// AllocationLister lists the kubelet's device allocations (a
// *podresources.Client): none when no kubelet runs here, an error when one
// runs but does not answer.
type AllocationLister interface {
	Allocations(ctx context.Context) ([]usage.Assignment, error)
}

// RuntimeConfig configures a [Runtime].
type RuntimeConfig struct {
	// Initial is the sharing at start (already checked with ValidateFor).
	Initial Config
	// Inventory returns the node's current devices. Required.
	Inventory func() gpu.Inventory
	// Allocations says which replicas pods hold; nil means no kubelet.
	Allocations AllocationLister
	// Timeout bounds one read of the allocations; zero means 5s.
	Timeout time.Duration
}

// Runtime is the sharing-update policy of a running node: every change
// (the admin API's PUT /v1/sharing, a changed --sharing-config) is checked
// against the current devices ([Config.ValidateFor]: unknown keys, shares
// that do not fit) and the kubelet's allocations ([CheckChange]: never take
// away or shrink an allocated replica) before it replaces the config. It
// is safe for concurrent use.
type Runtime struct {
	cfg   RuntimeConfig
	store *Store
}

// NewRuntime returns a runtime holding cfg.Initial.
func NewRuntime(cfg RuntimeConfig) *Runtime {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	return &Runtime{cfg: cfg, store: NewStore(cfg.Initial)}
}

// Sharing returns the current config.
func (r *Runtime) Sharing() Config { return r.store.Get() }

// SharingChanged returns a channel closed at the next change.
func (r *Runtime) SharingChanged() <-chan struct{} { return r.store.Changed() }

// Update replaces the config with next unless next is invalid for this
// node (an error wrapping ErrInvalid that names the key), takes away an
// allocated replica (ErrRefused), or the allocations cannot be read (then
// nobody can tell, so it is refused too). It reports whether the config
// changed.
func (r *Runtime) Update(ctx context.Context, next Config) (bool, error) {
	inv := r.cfg.Inventory()
	if err := next.ValidateFor(inv); err != nil {
		return false, err
	}
	allocated := map[string]string{}
	if r.cfg.Allocations != nil {
		ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		defer cancel()
		as, err := r.cfg.Allocations.Allocations(ctx)
		if err != nil {
			return false, fmt.Errorf("%w: cannot check which replicas are allocated, try again: %w", ErrRefused, err)
		}
		for _, x := range as {
			for _, id := range x.DeviceIDs {
				allocated[id] = x.Namespace + "/" + x.Pod
			}
		}
	}
	return r.store.Update(next, inv, allocated)
}
