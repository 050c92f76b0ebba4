package main

import (
	"flag"
	"slices"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/mig/migctl"
)

// migOptions are the MIG component's flags.
type migOptions struct {
	layoutFile string
	layoutName string
	force      bool
	resetGPUs  bool
	journal    string
}

func (o *migOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.layoutFile, "mig-config-file", "", "MIG layout file in mig-parted's format (version: v1, mig-configs: ...)")
	fs.StringVar(&o.layoutName, "mig-config", "", "name of the layout in --mig-config-file to apply at start and whenever the agent config or that file changes; empty applies none")
	fs.BoolVar(&o.force, "mig-force", false, "let the configured layout destroy MIG slices that are allocated or run processes")
	fs.BoolVar(&o.resetGPUs, "mig-reset-gpus", false, "reset an idle GPU whose MIG mode change needs it (simulated: ResetGPU; real: nvidia-smi -r), instead of leaving it pending")
	fs.StringVar(&o.journal, "mig-journal", defaultMIGJournal, "file recording an apply in progress, so a restarted agent finishes or undoes it")
}

// validate checks the flags and, when a layout is configured, that the
// file parses (through the layout parser and its bounds) and has it.
func (o *migOptions) validate() []error {
	if o.layoutName == "" {
		return nil
	}
	if o.layoutFile == "" {
		return []error{flagErr("mig-config", "%s needs --mig-config-file", printable.Quote(o.layoutName))}
	}
	f, err := mig.LoadLayoutFile(o.layoutFile)
	if err != nil {
		return []error{flagErr("mig-config-file", "%w", err)}
	}
	if !slices.Contains(f.Names(), o.layoutName) {
		return []error{flagErr("mig-config", "%s is not a layout of %s (it has %v)", printable.Quote(o.layoutName), o.layoutFile, f.Names())}
	}
	return nil
}

// layout is the configured layout, as the MIG controller takes it.
func (o *migOptions) layout() migctl.Layout {
	return migctl.Layout{File: o.layoutFile, Name: o.layoutName}
}
