// Command gpud is the GPU node agent and cluster allocator: one binary with
// subcommands. It is the only place that creates NVML handles, filesystem
// roots and loggers; packages under pkg/ get them passed in.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpud/gpud/internal/printable"
)

const usage = `gpud: GPU node agent and allocator for Kubernetes

Usage:
  gpud agent     [flags]   run the node agent (device plugin, telemetry, MIG)
  gpud inventory [flags]   print the node's GPUs, MIG devices and links
  gpud topo      [flags]   print the GPU link matrix as nvidia-smi topo -m
  gpud sim       ...       replay cluster traces through the allocator
  gpud mig       ...       plan, apply and show MIG layouts (mig-parted format)
  gpud scheduler [flags]   schedule pods' GPU claims cluster-wide (a Kubernetes scheduler)
  gpud certs     [flags]   write the telemetry stream's CA and certificates into Secrets
  gpud version             print the version

Run 'gpud <command> -h' for a command's flags. Without an NVIDIA driver, add
--simulate dgx-h100 (or dgx-a100, dgx-h200, pcie-l40s, or a node .yaml file).
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		// Errors may quote user files; binary bytes are never echoed raw.
		fmt.Fprintln(os.Stderr, "gpud:", printable.Lines(err.Error()))
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "agent":
		return runAgent(ctx, rest, stdout, stderr)
	case "inventory":
		return runInventory(ctx, rest, stdout, stderr)
	case "topo":
		return runTopo(ctx, rest, stdout, stderr)
	case "mig":
		return runMig(ctx, rest, stdout, stderr)
	case "sim":
		return runSim(ctx, rest, stdout, stderr)
	case "scheduler":
		return runScheduler(ctx, rest, stdout, stderr)
	case "certs":
		return runCerts(ctx, rest, stdout, stderr)
	case "version", "--version":
		if len(rest) > 0 {
			return fmt.Errorf("version: unexpected argument %s: the command takes none", printable.Quote(rest[0]))
		}
		fmt.Fprintln(stdout, "gpud", version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

// parseOnlyFlags parses args for a command that takes flags only: an
// argument left over (a typo, or a flag after a word, which the flag
// package stops parsing at) is an error naming it, not silently ignored.
func parseOnlyFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %s: the command takes flags only (flags after it were not read)", printable.Quote(fs.Arg(0)))
	}
	return nil
}
