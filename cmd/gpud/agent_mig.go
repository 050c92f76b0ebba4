package main

import (
	"flag"
	"slices"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/mig/migcli"
	"github.com/gpud/gpud/pkg/mig/migctl"
)

// migOptions are the MIG component's flags.
type migOptions struct {
	layout    migctl.Layout // the configured layout, as the MIG controller takes it
	force     bool
	resetGPUs bool
	journal   string
}

func (o *migOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.layout.File, "mig-config-file", "", "MIG layout file in mig-parted's format (version: v1, mig-configs: ...)")
	fs.StringVar(&o.layout.Name, "mig-config", "", "name of the layout in --mig-config-file to apply at start and whenever the agent config or that file changes; empty applies none")
	fs.BoolVar(&o.force, "mig-force", false, "let the configured layout destroy MIG slices that are allocated or run processes")
	fs.BoolVar(&o.resetGPUs, "mig-reset-gpus", false, "reset an idle GPU whose MIG mode change needs it (simulated: ResetGPU; real: nvidia-smi -r), instead of leaving it pending")
	fs.StringVar(&o.journal, "mig-journal", migcli.DefaultJournal, "file recording an apply in progress, so a restarted agent finishes or undoes it")
}

// validate checks the flags and, when a layout is configured, that the
// file parses (through the layout parser and its bounds) and has it.
func (o *migOptions) validate() []error {
	if o.layout.Name == "" {
		return nil
	}
	if o.layout.File == "" {
		return []error{flagErr("mig-config", "%s needs --mig-config-file", printable.Quote(o.layout.Name))}
	}
	f, err := mig.LoadLayoutFile(o.layout.File)
	if err != nil {
		return []error{flagErr("mig-config-file", "%w", err)}
	}
	if !slices.Contains(f.Names(), o.layout.Name) {
		return []error{flagErr("mig-config", "%s is not a layout of %s (it has %v)", printable.Quote(o.layout.Name), o.layout.File, f.Names())}
	}
	return nil
}
