package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/mig/migcli"
	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/simnode"
)

const migUsage = `usage:
  gpud mig plan    -f layouts.yaml -c NAME [--force] [--simulate X [--sim-state-file F]] [-o text|json]
  gpud mig apply   -f layouts.yaml -c NAME [--force] [--reset-gpus] [--journal J] [--simulate X [--sim-state-file F]] [-o text|json]
  gpud mig show    [--journal J] [--simulate X [--sim-state-file F]] [-o text|json]
  gpud mig recover --journal J [--rollback] [--force] [--simulate X [--sim-state-file F]] [-o text|json]

Without --simulate, plan and apply go through the running agent's admin
socket (--admin-socket), or straight to NVML when no agent listens. Either
way a slice is busy when a process runs on it or the kubelet allocated it
to a pod (--pod-resources-socket); busy slices are kept unless --force.

An apply with --journal that was killed leaves its journal: show reports
it (its --journal defaults to the agent's ` + migcli.DefaultJournal + `), apply
refuses to start over it, and recover finishes it (or, with --rollback,
puts its GPUs back to the layout before it), without an agent. An agent
started with --mig-journal J finishes it when it starts.`

// runMig implements `gpud mig ...`.
func runMig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseMigArgs(args, stdout, stderr)
	if c == nil || err != nil {
		return err
	}
	return migcli.Run(ctx, c, stdout, stderr)
}

// parseMigArgs parses the subcommand and its flags; nil, nil after help.
func parseMigArgs(args []string, stdout, stderr io.Writer) (*migcli.Command, error) {
	if len(args) == 0 {
		fmt.Fprintln(stderr, migUsage)
		return nil, errors.New("mig: missing subcommand")
	}
	c := &migcli.Command{Sub: args[0]}
	var nf nvmlFlags
	switch c.Sub {
	case "plan", "apply", "show", "recover":
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, migUsage)
		return nil, nil
	default:
		fmt.Fprintln(stderr, migUsage)
		return nil, fmt.Errorf("mig: unknown subcommand %s", printable.Quote(c.Sub))
	}
	fs := flag.NewFlagSet("gpud mig "+c.Sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	nf.register(fs)
	fs.StringVar(&c.File, "f", "", "layout file (mig-parted format)")
	fs.StringVar(&c.Config, "c", "", "name of the layout in the file (a key of mig-configs)")
	fs.BoolVar(&c.Force, "force", false, "destroy slices even when allocated or running processes, or when that cannot be checked")
	fs.BoolVar(&c.ResetGPUs, "reset-gpus", false, "without an agent: reset idle GPUs whose MIG mode change needs it (simulated: ResetGPU; real: nvidia-smi -r)")
	fs.StringVar(&c.Socket, "admin-socket", adminapi.DefaultSocket, "the agent's admin socket")
	fs.StringVar(&c.PodSocket, "pod-resources-socket", podresources.DefaultSocket, "without an agent: the kubelet's PodResources socket, to keep slices allocated to pods (absent: no kubelet, nothing allocated)")
	fs.StringVar(&c.Journal, "journal", "", "without an agent: file recording the apply in progress (see the agent's --mig-journal); show reads "+migcli.DefaultJournal+" when not set")
	fs.BoolVar(&c.Rollback, "rollback", false, "recover: put the GPUs of the interrupted apply back to the layout before it, instead of finishing it")
	fs.StringVar(&c.Output, "o", "text", "output: text or json")
	if err := parseOnlyFlags(fs, args[1:]); err != nil {
		return nil, fmt.Errorf("mig %s: %w", c.Sub, err)
	}
	if c.Sub == "show" && c.Journal == "" && !flagSet(fs, "journal") {
		c.Journal = migcli.DefaultJournal
	}
	c.Simulated, c.StateFile = nf.simulate != "", nf.stateFile
	c.Open = func() (nvml.Interface, *simnode.Node, func(), error) { return openNVML(nf) }
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// flagSet reports whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
