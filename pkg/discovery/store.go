package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/gpud/gpud/pkg/gpu"
)

// MinRediscoverInterval is the shortest period [Store.Run] accepts.
const MinRediscoverInterval = time.Second

// Store holds the node's published inventory: what discovery last read,
// with the health the monitor set on top (a GPU or MIG device the monitor
// marked unhealthy stays so across rediscovery until it heals). The device
// plugin, the HTTP server, telemetry and the MIG service read it;
// [Store.Changed] wakes them. It is safe for concurrent use.
type Store struct {
	disc *Discoverer
	log  *slog.Logger

	mu         sync.Mutex
	discovered gpu.Inventory // last read from NVML
	inv        gpu.Inventory // published: discovered + health overrides
	haveInv    bool
	changed    chan struct{} // closed and replaced when inv changes
	health     map[string]healthOverride
}

// healthOverride is a health state set by the health monitor; it outlives
// rediscovery until the monitor clears it.
type healthOverride struct {
	health gpu.Health
	reason string
}

// NewStore returns an empty store that rereads the node through disc (nil:
// only [Store.Set] fills it). log may be nil.
func NewStore(disc *Discoverer, log *slog.Logger) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{disc: disc, log: log, changed: make(chan struct{}), health: map[string]healthOverride{}}
}

// Inventory returns the latest inventory and whether one was read yet.
func (s *Store) Inventory() (gpu.Inventory, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inv, s.haveInv
}

// Current returns the latest inventory (empty before the first read).
func (s *Store) Current() gpu.Inventory {
	inv, _ := s.Inventory()
	return inv
}

// InventoryChanged returns a channel closed at the next inventory change.
func (s *Store) InventoryChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Set stores a discovered inventory and publishes it with the health
// overrides applied. It reports whether the published one changed.
func (s *Store) Set(discovered gpu.Inventory) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.discovered = discovered
	return s.publishLocked()
}

// publishLocked derives the published inventory (discovered + health
// overrides) and wakes watchers when it changed.
func (s *Store) publishLocked() bool {
	inv := s.discovered
	inv.GPUs = make([]gpu.GPU, len(s.discovered.GPUs))
	for i, g := range s.discovered.GPUs {
		g.MIGDevices = append([]gpu.MIGDevice(nil), g.MIGDevices...)
		if o, ok := s.health[g.UUID]; ok && g.Health != gpu.Lost {
			g.Health, g.HealthReason = o.health, o.reason
		}
		for j := range g.MIGDevices {
			if o, ok := s.health[g.MIGDevices[j].UUID]; ok {
				g.MIGDevices[j].Health, g.MIGDevices[j].HealthReason = o.health, o.reason
			}
		}
		inv.GPUs[i] = g
	}
	if s.haveInv && reflect.DeepEqual(s.inv, inv) {
		return false
	}
	s.inv, s.haveInv = inv, true
	close(s.changed)
	s.changed = make(chan struct{})
	return true
}

// SetHealth overrides a GPU's or MIG device's health (Healthy clears the
// override, leaving what discovery reports) and wakes watchers when that
// changes the inventory. It is a [SetHealthFunc].
func (s *Store) SetHealth(uuid string, h gpu.Health, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h == gpu.Healthy {
		delete(s.health, uuid)
	} else {
		s.health[uuid] = healthOverride{health: h, reason: reason}
	}
	if s.haveInv {
		s.publishLocked()
	}
}

// Rediscover rereads the node now (after a MIG change, say), publishes the
// result and returns the published inventory.
func (s *Store) Rediscover() (gpu.Inventory, error) {
	if s.disc == nil {
		return gpu.Inventory{}, fmt.Errorf("discovery: store has no discoverer")
	}
	inv, err := s.disc.Inventory()
	if err != nil {
		return gpu.Inventory{}, fmt.Errorf("rediscover: %w", err)
	}
	if s.Set(inv) {
		s.log.Info("inventory updated", "gpus", len(inv.GPUs), "links", len(inv.Links))
	}
	return s.Current(), nil
}

// Run rereads the node every interval (at least [MinRediscoverInterval])
// until ctx ends; a failed read is logged and retried at the next tick.
func (s *Store) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(max(interval, MinRediscoverInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := s.Rediscover(); err != nil {
				s.log.Warn("inventory read failed", "err", err)
			}
		}
	}
}
