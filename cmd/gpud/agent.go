package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/procattr"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/timeslice"
)

// component is one part of the agent. Each registers its own flags (which
// are also its config-file keys) and runs until ctx ends; the first error
// stops the agent.
type component interface {
	name() string
	registerFlags(fs *flag.FlagSet)
	run(ctx context.Context, a *agent) error
}

// agentComponents lists the agent's parts in start order. A new part is one
// file with a type implementing component, and one line here.
func agentComponents() []component {
	return []component{
		&httpComponent{},
		&inventoryComponent{},
		&devicePluginComponent{},
		&telemetryComponent{},
		&adminComponent{},
		&migComponent{},
		&sharingComponent{},
	}
}

// agent is what components share: the NVML handle, the logger and the
// current inventory.
type agent struct {
	log  *slog.Logger
	lib  nvml.Interface
	sim  *simnode.Node // nil on real hardware
	disc *discovery.Discoverer
	node string

	flags    *flag.FlagSet
	mux      *http.ServeMux       // the HTTP server's routes (/healthz, /metrics, ...)
	adminMux *http.ServeMux       // the admin API's routes, on the root-only socket
	metrics  *prometheus.Registry // served on /metrics; components register here
	sharing  *timeslice.Store     // GPU sharing, changed at run time

	procRoot    string // host /proc: pid -> cgroup -> pod
	podLogsRoot string // kubelet pod log dirs: pod UID -> namespace/name

	podResOnce sync.Once
	podRes     *podresources.Client

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

// flag returns the value of any agent flag, so a component can read a flag
// another one registered; "" for an unknown name.
func (a *agent) flag(name string) string {
	if f := a.flags.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// PodResources is the agent's kubelet PodResources client, on the socket
// --pod-resources-socket names.
func (a *agent) PodResources() *podresources.Client {
	a.podResOnce.Do(func() { a.podRes = podresources.New(a.flag("pod-resources-socket")) })
	return a.podRes
}

// Sharing returns the current sharing config (the device plugin's
// SharingSource).
func (a *agent) Sharing() timeslice.Config { return a.sharing.Get() }

// SharingChanged returns a channel closed at the next sharing change.
func (a *agent) SharingChanged() <-chan struct{} { return a.sharing.Changed() }

// Inventory returns the latest inventory and whether one was read yet.
func (a *agent) Inventory() (gpu.Inventory, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inv, a.haveInv
}

// InventoryChanged returns a channel closed at the next inventory change.
func (a *agent) InventoryChanged() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changed
}

// setInventory stores a discovered inventory and publishes it with the
// health overrides applied. It reports whether the published one changed.
func (a *agent) setInventory(discovered gpu.Inventory) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.discovered = discovered
	return a.publishLocked()
}

// publishLocked derives the published inventory (discovered + health
// overrides) and wakes watchers when it changed.
func (a *agent) publishLocked() bool {
	inv := a.discovered
	inv.GPUs = make([]gpu.GPU, len(a.discovered.GPUs))
	for i, g := range a.discovered.GPUs {
		g.MIGDevices = append([]gpu.MIGDevice(nil), g.MIGDevices...)
		if o, ok := a.health[g.UUID]; ok && g.Health != gpu.Lost {
			g.Health, g.HealthReason = o.health, o.reason
		}
		for j := range g.MIGDevices {
			if o, ok := a.health[g.MIGDevices[j].UUID]; ok {
				g.MIGDevices[j].Health, g.MIGDevices[j].HealthReason = o.health, o.reason
			}
		}
		inv.GPUs[i] = g
	}
	if a.haveInv && reflect.DeepEqual(a.inv, inv) {
		return false
	}
	a.inv, a.haveInv = inv, true
	close(a.changed)
	a.changed = make(chan struct{})
	return true
}

// SetHealth overrides a GPU's or MIG device's health (Healthy clears the
// override, leaving what discovery reports) and wakes watchers when that
// changes the inventory.
func (a *agent) SetHealth(uuid string, h gpu.Health, reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.health == nil {
		a.health = map[string]healthOverride{}
	}
	if h == gpu.Healthy {
		delete(a.health, uuid)
	} else {
		a.health[uuid] = healthOverride{health: h, reason: reason}
	}
	if a.haveInv {
		a.publishLocked()
	}
}

// Rediscover rereads the node now (after a MIG change, say) and publishes
// the result.
func (a *agent) Rediscover() (gpu.Inventory, error) {
	inv, err := a.disc.Inventory()
	if err != nil {
		return gpu.Inventory{}, fmt.Errorf("rediscover: %w", err)
	}
	a.setInventory(inv)
	got, _ := a.Inventory()
	return got, nil
}

// agentOptions are the agent's own flags; components register theirs.
type agentOptions struct {
	nvml        nvmlFlags
	configPath  string
	logFormat   string
	logLevel    string
	procRoot    string
	podLogsRoot string
}

// agentFlagSet builds the agent's complete flag set: its own flags and
// every component's. Tests use it to check manifests name real flags.
func agentFlagSet(stderr io.Writer) (*flag.FlagSet, *agentOptions, []component) {
	fs := flag.NewFlagSet("gpud agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &agentOptions{}
	o.nvml.register(fs)
	fs.StringVar(&o.configPath, "config", "", "agent config file (YAML; keys are flag names, flags on the command line win)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.procRoot, "proc-root", procattr.DefaultProcRoot, "the host's /proc (GPU processes are host PIDs: run with hostPID or mount the host's /proc here)")
	fs.StringVar(&o.podLogsRoot, "pod-logs-root", procattr.DefaultPodLogsRoot, "the kubelet's pod log directory, which maps pod UIDs to namespace/name")
	comps := agentComponents()
	for _, c := range comps {
		c.registerFlags(fs)
	}
	return fs, o, comps
}

func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, o, comps := agentFlagSet(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("agent: unexpected arguments %q", fs.Args())
	}
	if o.configPath != "" {
		if err := applyConfigFile(fs, o.configPath); err != nil {
			return err
		}
	}
	nf := o.nvml
	log, err := newLogger(stderr, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	lib, sim, closeLib, err := openNVML(nf)
	if err != nil {
		return err
	}
	defer closeLib()
	sharing := timeslice.Config{}
	if file := fs.Lookup("sharing-config"); file != nil && file.Value.String() != "" {
		if sharing, err = loadSharing(file.Value.String()); err != nil {
			return err
		}
	}
	a := &agent{
		log: log, lib: lib, sim: sim, node: nf.resolveNodeName(sim), changed: make(chan struct{}),
		flags: fs, mux: http.NewServeMux(), adminMux: http.NewServeMux(),
		metrics: prometheus.NewRegistry(), sharing: timeslice.NewStore(sharing),
		procRoot: o.procRoot, podLogsRoot: o.podLogsRoot,
	}
	defer func() {
		if a.podRes != nil {
			_ = a.podRes.Close()
		}
	}()
	a.disc = discovery.New(lib, a.node, log.With("component", "discovery"))
	log.Info("agent starting", "version", version, "node", a.node, "simulated", sim != nil)

	g, ctx := errgroup.WithContext(ctx)
	for _, c := range comps {
		g.Go(func() error {
			if err := c.run(ctx, a); err != nil {
				return fmt.Errorf("%s: %w", c.name(), err)
			}
			return nil
		})
	}
	err = g.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("agent stopped", "err", err)
		return err
	}
	log.Info("agent stopped")
	return nil
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
