package deviceplugin

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpud/gpud/internal/wait"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/timeslice"
)

// Source is where the manager reads the node: the agent's inventory, with
// health overrides applied.
type Source interface {
	// Inventory returns the latest inventory and whether one was read yet.
	Inventory() (gpu.Inventory, bool)
	// InventoryChanged returns a channel closed at the next change.
	InventoryChanged() <-chan struct{}
}

// SharingSource, when a Source implements it, supplies the sharing config at
// run time; it replaces Config.Sharing, and a change re-advertises devices.
type SharingSource interface {
	Sharing() timeslice.Config
	SharingChanged() <-chan struct{}
}

// Manager runs one plugin server per advertised resource. Create it with
// New and call Run once.
type Manager struct {
	cfg Config
	src Source
	log *slog.Logger
	// kubelet is the latest kubelet start seen; only Run's goroutine
	// touches it.
	kubelet kubeletInstance

	mu      sync.Mutex
	plugins map[string]*plugin
	cdi     *cdispec.Spec // last spec written; nil before the first
	cdiErr  bool          // the last write failed: retry on the next tick
}

// New returns a manager; cfg must pass Validate. log may be nil.
func New(cfg Config, src Source, log *slog.Logger) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{cfg: cfg, src: src, log: log, plugins: map[string]*plugin{}}, nil
}

// Resources returns the names of the resources served now, sorted; a
// resource that is gone stays served with no devices.
func (m *Manager) Resources() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.plugins))
}

// Run serves until ctx ends; it returns nil then. It waits for the plugin
// directory to exist (the kubelet creates it) and for the first inventory.
func (m *Manager) Run(ctx context.Context) error {
	if !m.waitForDir(ctx) {
		return nil
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	watcher, err := fsnotify.NewWatcher()
	if err == nil {
		err = watcher.Add(m.cfg.PluginDir)
	}
	var events <-chan fsnotify.Event
	if err != nil {
		m.log.Warn("cannot watch the plugin dir, polling instead", "dir", m.cfg.PluginDir, "err", err)
	} else {
		defer watcher.Close()
		events = watcher.Events
	}
	poll := time.NewTicker(m.cfg.PollInterval)
	defer poll.Stop()
	m.kubelet, _ = currentKubelet(m.cfg.kubeletSocket())
	sharing, _ := m.src.(SharingSource)
	for {
		changed := m.src.InventoryChanged()
		var sharingChanged <-chan struct{}
		if sharing != nil {
			sharingChanged = sharing.SharingChanged()
		}
		if inv, ok := m.src.Inventory(); ok {
			m.apply(ctx, inv, &wg)
		}
		// Wait for a reason to re-apply: an inventory change, or a CDI
		// write to retry. Socket events are dispatched meanwhile.
		for reapply := false; !reapply; {
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				reapply = true
			case <-sharingChanged:
				reapply = true
			case ev, ok := <-events:
				if !ok {
					events = nil
					continue
				}
				m.onEvent(ev)
			case <-poll.C:
				m.checkKubelet() // an event missed
				reapply = m.retryCDI()
			}
		}
	}
}

// waitForDir waits for the plugin dir, logging once; false when ctx ended.
func (m *Manager) waitForDir(ctx context.Context) bool {
	logged := false
	for {
		if fi, err := os.Stat(m.cfg.PluginDir); err == nil && fi.IsDir() {
			return true
		}
		if !logged {
			m.log.Warn("device plugin dir missing, waiting for the kubelet to create it", "dir", m.cfg.PluginDir)
			logged = true
		}
		if !wait.Sleep(ctx, m.cfg.PollInterval) {
			return false
		}
	}
}

func (m *Manager) onEvent(ev fsnotify.Event) {
	name := filepath.Base(ev.Name)
	if name == filepath.Base(m.cfg.kubeletSocket()) {
		if ev.Has(fsnotify.Create) {
			m.checkKubelet()
		}
		return
	}
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		m.broadcast(func(p *plugin) {
			if filepath.Base(m.cfg.socketPath(p.resource)) == name {
				notify(p.socketGone)
			}
		})
	}
}

// checkKubelet tells the plugins when kubelet.sock belongs to a kubelet
// start not seen before (the event and the poll both call it; only the
// first to see a start tells). Each plugin still checks whom it registered
// with, since its own re-serve may have reached the new kubelet first.
func (m *Manager) checkKubelet() {
	now, ok := currentKubelet(m.cfg.kubeletSocket())
	if !ok || now == m.kubelet {
		return
	}
	m.kubelet = now
	m.log.Info("kubelet started, registering again")
	m.broadcast(func(p *plugin) { notify(p.kubeletUp) })
}

func (m *Manager) broadcast(f func(p *plugin)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.plugins {
		f(p)
	}
}

// apply advertises an inventory: CDI spec first (so Allocate's names
// resolve), then every resource's list; new resources get a server, gone
// ones are emptied.
func (m *Manager) apply(ctx context.Context, inv gpu.Inventory, wg *sync.WaitGroup) {
	cfg := m.cfg
	if s, ok := m.src.(SharingSource); ok {
		cfg.Sharing = s.Sharing()
	}
	res := build(inv, cfg)
	for _, w := range res.warnings {
		m.log.Warn("device not advertised as configured", "reason", w)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cfg.CDIDir != "" {
		m.writeCDILocked(buildCDISpec(res.sets, m.cfg.MPSRoot, m.cfg.DeviceFiles, m.cfg.DriverEdits))
	}
	for name, s := range res.sets {
		p, ok := m.plugins[name]
		if !ok {
			p = newPlugin(name, m.cfg, m.log)
			m.plugins[name] = p
			p.update(s)
			wg.Go(func() { p.run(ctx) })
			m.log.Info("resource advertised", "resource", name, "devices", len(s.devices))
			continue
		}
		if p.update(s) {
			m.log.Info("device list changed", "resource", name, "devices", len(s.devices), "unhealthy", unhealthy(s))
		}
	}
	for name, p := range m.plugins {
		if _, ok := res.sets[name]; !ok && p.update(&deviceSet{resource: name, byID: map[string]*device{}}) {
			m.log.Info("resource gone, advertising no devices", "resource", name)
		}
	}
}

func unhealthy(s *deviceSet) int {
	n := 0
	for _, d := range s.devices {
		if !d.healthy() {
			n++
		}
	}
	return n
}

func (m *Manager) writeCDILocked(spec *cdispec.Spec) {
	if !m.cdiErr && m.cdi != nil && reflect.DeepEqual(m.cdi, spec) {
		return
	}
	if err := writeCDISpec(m.cfg.CDIDir, spec); err != nil {
		if !m.cdiErr {
			m.log.Error("CDI spec not written, containers may not get their GPUs", "err", err)
		}
		m.cdi, m.cdiErr = spec, true
		return
	}
	if m.cdiErr {
		m.log.Info("CDI spec written after earlier failure")
	}
	m.cdi, m.cdiErr = spec, false
	m.log.Debug("CDI spec written", "dir", m.cfg.CDIDir, "devices", specDevices(spec))
}

// retryCDI reports whether a failed CDI write should be retried (by
// re-applying the inventory).
func (m *Manager) retryCDI() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cdiErr
}

func specDevices(s *cdispec.Spec) int {
	if s == nil {
		return 0
	}
	return len(s.Devices)
}
