package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/internal/taskgroup"
	"github.com/gpud/gpud/pkg/computemode"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/mps"
	"github.com/gpud/gpud/pkg/timeslice"
)

// mpsOptions are the MPS supervisor's flags.
type mpsOptions struct {
	enabled    bool
	driverRoot string
	root       string
}

func (o *mpsOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.enabled, "mps", true, "run and supervise one MPS control daemon per shared GPU (where <driver-root>/"+mps.ControlBinary+" exists; otherwise the agent says so once and runs without)")
	fs.StringVar(&o.driverRoot, "driver-root", "/", "the host driver's root, where the MPS control program is")
	fs.StringVar(&o.root, "mps-root", mps.DefaultRoot, "each shared GPU's MPS pipe and log directories go to <dir>/<gpu-uuid>/{pipe,log}, the daemons' shared memory to <dir>/shm; containers mount them from the host, so the agent must see this dir at the host's path, and <dir>/shm at its /dev/shm")
}

// mpsAgent is the MPS part of the agent: the supervisor and the compute
// modes of the GPUs it shares. Root is what the device plugin and the DRA
// driver mount into containers; empty when no daemon runs.
type mpsAgent struct {
	Root      string
	tasks     []taskgroup.Task
	fractions atomic.Pointer[func() []string]
	sup       *mps.Supervisor      // nil when no daemon runs
	modes     *computemode.Manager // nil when no daemon runs
}

// withStatus adds the MPS line to the enforcement line of /readyz: how
// many daemons run and GPUs are EXCLUSIVE_PROCESS, and every compute mode
// failure with its GPU.
func (m *mpsAgent) withStatus(enforcement enforceStatus) enforceStatus {
	if m.sup == nil {
		return enforcement
	}
	return func() string {
		line := m.status()
		if enforcement != nil {
			line = enforcement() + "\n" + line
		}
		return line
	}
}

// status is the MPS line of /readyz.
func (m *mpsAgent) status() string {
	running, daemons := 0, m.sup.Status()
	for _, st := range daemons {
		if st.Running {
			running++
		}
	}
	exclusive := 0
	var failed []string
	for u, st := range m.modes.Status() {
		if st.Set {
			exclusive++
		}
		if st.Err != "" {
			failed = append(failed, u+": "+st.Err)
		}
	}
	slices.Sort(failed)
	line := fmt.Sprintf("mps: %d of %d daemons running, %d GPUs EXCLUSIVE_PROCESS", running, len(daemons), exclusive)
	if len(failed) > 0 {
		line += "; compute mode not set: " + strings.Join(failed, "; ")
	}
	return line
}

// shareFractions adds the GPUs that prepared DRA fractions (by UUID) to
// those the sharing config shares; it is read every mpsPollInterval.
func (m *mpsAgent) shareFractions(f func() []string) { m.fractions.Store(&f) }

// mpsPollInterval is how often the DRA fractions are reread.
const mpsPollInterval = time.Second

// newMPSAgent returns the supervisor's task, or none (an empty Root) when
// --mps is off, the driver has no MPS control program, or the node is
// simulated and --driver-root was left at the host's (a simulated node
// must not start the host's daemons; tests point --driver-root at a
// stand-in). A GPU that becomes shared is set EXCLUSIVE_PROCESS before its
// daemon is started, and gets its previous mode back as its daemon is told
// to quit when it is unshared, or after every daemon quit when the agent
// stops. Compute modes are set only with a daemon: an exclusive GPU
// without one would admit a single process.
func (o *mpsOptions) newMPSAgent(simulated bool, lib nvml.Interface, sharing *timeslice.Runtime, store interface {
	Current() gpu.Inventory
	InventoryChanged() <-chan struct{}
}, log *slog.Logger) *mpsAgent {
	m := &mpsAgent{}
	if !o.enabled {
		return m
	}
	if simulated && o.driverRoot == "/" {
		log.Info("mps not available", "reason", "simulated node with --driver-root /")
		return m
	}
	sup, err := mps.New(mps.Config{DriverRoot: o.driverRoot, Root: o.root}, log)
	if err != nil {
		log.Warn("mps not available", "err", err)
		return m
	}
	root, err := filepath.Abs(sup.Root())
	if err != nil {
		log.Warn("mps not available", "err", err)
		return m
	}
	checkShm(root, log)
	modes := computemode.New(lib, computemode.Config{StateDir: root}, log)
	run := func(ctx context.Context) error {
		err := taskgroup.Run(ctx, []taskgroup.Task{
			{Run: sup.Run},
			{Run: func(ctx context.Context) error { return m.follow(ctx, sharing, store, modes, sup, log) }},
		})
		// The daemons quit when sup.Run ended: the GPUs go back to the
		// modes they had.
		if rerr := modes.RestoreAll(); rerr != nil {
			log.Warn("compute mode not restored", "err", rerr)
		}
		return err
	}
	m.Root, m.tasks, m.sup, m.modes = root, []taskgroup.Task{{Name: "mps", Run: run}}, sup, modes
	return m
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

// follow keeps the supervisor and the compute modes on the shared GPUs:
// the sharing config's and the DRA fractions'. A compute mode failure is
// logged once per distinct error and retried every mpsPollInterval; the
// daemon still runs (its clients get their limits; other processes are
// not kept off the GPU).
func (m *mpsAgent) follow(ctx context.Context, sharing *timeslice.Runtime, store interface {
	Current() gpu.Inventory
	InventoryChanged() <-chan struct{}
}, modes *computemode.Manager, sup *mps.Supervisor, log *slog.Logger) error {
	tick := time.NewTicker(mpsPollInterval)
	defer tick.Stop()
	var last []string
	lastErr := ""
	for {
		sharingChanged, invChanged := sharing.SharingChanged(), store.InventoryChanged()
		shared := sharedDevices(sharing.Sharing(), store.Current())
		if f := m.fractions.Load(); f != nil {
			shared = append(shared, (*f)()...)
		}
		slices.Sort(shared)
		shared = slices.Compact(shared)
		if !slices.Equal(shared, last) || lastErr != "" {
			err := modes.Set(shared)
			switch {
			case err != nil && err.Error() != lastErr:
				log.Warn("compute mode not set", "err", err)
				lastErr = err.Error()
			case err == nil:
				lastErr = ""
			}
		}
		if !slices.Equal(shared, last) {
			sup.SetShared(shared)
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

// preparedFractions lists the GPUs (UUIDs) that DRA fractions were
// prepared on: each needs its MPS daemon.
func preparedFractions(p *dra.Preparer) func() []string {
	return func() []string {
		var out []string
		for _, c := range p.Prepared() {
			for _, d := range c.Devices {
				if d.Fraction() {
					out = append(out, d.Device.GPUUUID)
				}
			}
		}
		return out
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
