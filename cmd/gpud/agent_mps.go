package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"

	"golang.org/x/sync/errgroup"

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
	fs.StringVar(&o.root, "mps-root", mps.DefaultRoot, "each shared GPU's MPS pipe and log directories go to <dir>/<gpu-uuid>/{pipe,log}")
}

// newMPSTask returns the supervisor's task, or none when --mps is off,
// the driver has no MPS control program, or the node is simulated and
// --driver-root was left at the host's (a simulated node must not start
// the host's daemons; tests point --driver-root at a stand-in).
func (o *mpsOptions) newMPSTask(simulated bool, sharing *timeslice.Runtime, store interface {
	Current() gpu.Inventory
	InventoryChanged() <-chan struct{}
}, log *slog.Logger) []task {
	if !o.enabled {
		return nil
	}
	if simulated && o.driverRoot == "/" {
		log.Info("mps not available", "reason", "simulated node with --driver-root /")
		return nil
	}
	sup, err := mps.New(mps.Config{DriverRoot: o.driverRoot, Root: o.root}, log)
	if err != nil {
		log.Warn("mps not available", "err", err)
		return nil
	}
	run := func(ctx context.Context) error {
		g, ctx := errgroup.WithContext(ctx)
		g.Go(func() error { return sup.Run(ctx) })
		g.Go(func() error {
			for {
				sharingChanged, invChanged := sharing.SharingChanged(), store.InventoryChanged()
				sup.SetShared(sharedDevices(sharing.Sharing(), store.Current()))
				select {
				case <-ctx.Done():
					return nil
				case <-sharingChanged:
				case <-invChanged:
				}
			}
		})
		if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
	return []task{{"mps", run}}
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
