package mpsctl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/internal/taskgroup"
	"github.com/gpud/gpud/pkg/computemode"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/mps"
	"github.com/gpud/gpud/pkg/timeslice"
)

// PollInterval is how often the DRA fractions are reread and a failed
// compute mode is retried.
const PollInterval = time.Second

// Inventory is the inventory store as the controller reads it.
type Inventory interface {
	Current() gpu.Inventory
	InventoryChanged() <-chan struct{}
}

// Config is the controller's configuration.
type Config struct {
	// Enabled runs the daemons; false leaves the controller off.
	Enabled bool
	// DriverRoot is the host driver's root, where [mps.ControlBinary] is.
	DriverRoot string
	// Root holds each shared GPU's pipe and log directories and the
	// daemons' shared memory (see [mps.Config]).
	Root string
	// Simulated is true on a simulated node: with DriverRoot "/" the
	// controller is then off, so a simulated node never starts the host's
	// daemons (tests point DriverRoot at a stand-in).
	Simulated bool
	// NVML sets the compute modes; Sharing is the sharing runtime;
	// Inventory the inventory store. Required when Enabled.
	NVML      nvml.Interface
	Sharing   *timeslice.Runtime
	Inventory Inventory
	// Log may be nil.
	Log *slog.Logger
}

// Validate reports the missing dependencies of an enabled controller.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	var errs []error
	if c.NVML == nil {
		errs = append(errs, errors.New("missing NVML"))
	}
	if c.Sharing == nil {
		errs = append(errs, errors.New("missing Sharing"))
	}
	if c.Inventory == nil {
		errs = append(errs, errors.New("missing Inventory"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mpsctl: %w", err)
	}
	return nil
}

// Controller is the MPS part of the agent. It is off (an empty [Root],
// a [Controller.Run] that returns at once) when not enabled, when the
// driver has no MPS control program, or on a simulated node with the
// host's driver root; New says why in the log.
type Controller struct {
	cfg       Config
	log       *slog.Logger
	root      string
	fractions atomic.Pointer[func() []string]
	sup       *mps.Supervisor      // nil when off
	modes     *computemode.Manager // nil when off
}

// New builds the controller; it fails only on an invalid cfg. A device
// that becomes shared is set EXCLUSIVE_PROCESS before its daemon starts,
// and gets its previous mode back as its daemon is told to quit when it
// is unshared, or after every daemon quit when Run ends. Compute modes
// are set only with a daemon: an exclusive GPU without one would admit a
// single process.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: log}
	if !cfg.Enabled {
		return c, nil
	}
	if cfg.Simulated && cfg.DriverRoot == "/" {
		log.Info("mps not available", "reason", "simulated node with --driver-root /")
		return c, nil
	}
	sup, err := mps.New(mps.Config{DriverRoot: cfg.DriverRoot, Root: cfg.Root}, log)
	if err != nil {
		log.Warn("mps not available", "err", err)
		return c, nil
	}
	root, err := filepath.Abs(sup.Root())
	if err != nil {
		log.Warn("mps not available", "err", err)
		return c, nil
	}
	checkShm(root, log)
	c.root, c.sup, c.modes = root, sup, computemode.New(cfg.NVML, computemode.Config{StateDir: root}, log)
	return c, nil
}

// Root is what the device plugin and the DRA driver mount into
// containers; empty when the controller is off.
func (c *Controller) Root() string { return c.root }

// ShareFractions adds the GPUs that prepared DRA fractions (by UUID, as f
// lists them) to those the sharing config shares; f is read every
// [PollInterval]. It may be called while Run runs.
func (c *Controller) ShareFractions(f func() []string) { c.fractions.Store(&f) }

// Run supervises the daemons and follows the shared devices until ctx
// ends, then gives the GPUs back the modes they had. Off, it returns nil
// at once.
func (c *Controller) Run(ctx context.Context) error {
	if c.sup == nil {
		return nil
	}
	err := taskgroup.Run(ctx, []taskgroup.Task{{Run: c.sup.Run}, {Run: c.follow}})
	// The daemons quit when sup.Run ended: the GPUs go back to the modes
	// they had.
	if rerr := c.modes.RestoreAll(); rerr != nil {
		c.log.Warn("compute mode not restored", "err", rerr)
	}
	return err
}

// agentShm is the agent's own /dev/shm, where the daemons it starts keep
// the shared memory their clients map.
const agentShm = "/dev/shm"

// checkShm says once when the daemons' /dev/shm is not <root>/shm, which
// containers sharing a GPU mount as theirs: their CUDA clients would then
// not reach the servers' shared memory. The DaemonSet mounts it.
func checkShm(root string, log *slog.Logger) {
	shm := mps.ShmDir(root)
	if err := os.MkdirAll(shm, 0o755); err != nil {
		log.Warn("mps shared memory dir not created", "dir", shm, "err", err)
		return
	}
	a, errA := os.Stat(agentShm)
	b, errB := os.Stat(shm)
	if errA != nil || errB != nil || !os.SameFile(a, b) {
		log.Warn("mps clients in other containers cannot reach the daemons' shared memory", "agent_shm", agentShm, "client_shm", shm,
			"fix", "mount the host's "+shm+" at the agent's "+agentShm+" (the DaemonSet does)")
	}
}

// follow keeps the supervisor and the compute modes on the shared devices:
// the sharing config's and the DRA fractions'. A compute mode failure is
// logged once per distinct error and retried every PollInterval; the
// daemon still runs (its clients get their limits; other processes are
// not kept off the GPU).
func (c *Controller) follow(ctx context.Context) error {
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	var last []string
	lastErr := ""
	for {
		sharingChanged, invChanged := c.cfg.Sharing.SharingChanged(), c.cfg.Inventory.InventoryChanged()
		shared := sharedDevices(c.cfg.Sharing.Sharing(), c.cfg.Inventory.Current())
		if f := c.fractions.Load(); f != nil {
			shared = append(shared, (*f)()...)
		}
		slices.Sort(shared)
		shared = slices.Compact(shared)
		if !slices.Equal(shared, last) || lastErr != "" {
			err := c.modes.Set(shared)
			switch {
			case err != nil && err.Error() != lastErr:
				c.log.Warn("compute mode not set", "err", err)
				lastErr = err.Error()
			case err == nil:
				lastErr = ""
			}
		}
		if !slices.Equal(shared, last) {
			c.sup.SetShared(shared)
			last = shared
		}
		select {
		case <-ctx.Done():
			return nil
		case <-sharingChanged:
		case <-invChanged:
		case <-tick.C:
		}
	}
}

// sharedDevices lists the GPUs and MIG devices the sharing config shares:
// each gets an MPS daemon, since every share carries MPS limits.
func sharedDevices(c timeslice.Config, inv gpu.Inventory) []string {
	var out []string
	for _, g := range inv.GPUs {
		if _, ok := c.For(g.UUID, g.Index); ok && !g.MIGEnabled {
			out = append(out, g.UUID)
		}
		for _, m := range g.MIGDevices {
			if _, ok := c.For(m.UUID, -1); ok {
				out = append(out, m.UUID)
			}
		}
	}
	return out
}
