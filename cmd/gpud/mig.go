package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/simnode"
)

const migUsage = `usage:
  gpud mig plan  -f layouts.yaml -c NAME [--force] [--simulate X [--sim-state-file F]] [-o text|json]
  gpud mig apply -f layouts.yaml -c NAME [--force] [--reset-gpus] [--simulate X [--sim-state-file F]] [-o text|json]
  gpud mig show  [--simulate X [--sim-state-file F]]

Without --simulate, plan and apply go through the running agent's admin
socket (--admin-socket), or straight to NVML when no agent runs.`

// runMig implements `gpud mig ...`.
func runMig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, migUsage)
		return errors.New("mig: missing subcommand")
	}
	sub := args[0]
	switch sub {
	case "plan", "apply", "show":
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, migUsage)
		return nil
	default:
		fmt.Fprintln(stderr, migUsage)
		return fmt.Errorf("mig: unknown subcommand %q", sub)
	}
	fs := flag.NewFlagSet("gpud mig "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var nf nvmlFlags
	nf.register(fs)
	file := fs.String("f", "", "layout file (mig-parted format)")
	name := fs.String("c", "", "name of the layout in the file (a key of mig-configs)")
	force := fs.Bool("force", false, "destroy slices even when allocated or running processes")
	resetGPUs := fs.Bool("reset-gpus", false, "without an agent: reset idle GPUs whose MIG mode change needs it (simulated: ResetGPU; real: nvidia-smi -r)")
	socket := fs.String("admin-socket", adminapi.DefaultSocket, "the agent's admin socket")
	journal := fs.String("journal", "", "without an agent: file recording the apply in progress (see the agent's --mig-journal)")
	output := fs.String("o", "text", "output: text or json")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *output != "text" && *output != "json" {
		return fmt.Errorf("mig: -o %q: want text or json", *output)
	}
	if sub == "show" {
		return migShow(nf, stdout, *output)
	}
	if *file == "" || *name == "" {
		return fmt.Errorf("mig %s: -f FILE and -c NAME are required", sub)
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return fmt.Errorf("mig: %w", err)
	}
	layouts, err := mig.ParseLayoutFile(data)
	if err != nil {
		return fmt.Errorf("%s: %w", *file, err)
	}
	if nf.simulate == "" {
		var res mig.Result
		err := adminapi.NewClient(*socket, 0).Call(ctx, "POST", "/v1/mig/"+sub, migRequest{Layouts: string(data), Config: *name, Force: *force}, &res)
		if err == nil {
			return printMig(stdout, sub, res, *output, "agent")
		}
		if !errors.Is(err, adminapi.ErrNoAgent) {
			return fmt.Errorf("mig %s via the agent: %w", sub, err)
		}
	}
	lib, sim, closeLib, err := openNVML(nf)
	if err != nil {
		return err
	}
	defer closeLib()
	st, err := mig.ReadState(lib)
	if err != nil {
		return err
	}
	want, err := layouts.Resolve(*name, st)
	if err != nil {
		return fmt.Errorf("%s: %w", *file, err)
	}
	ps, err := mig.ReadProcesses(lib)
	if err != nil {
		return fmt.Errorf("mig: check running processes: %w", err)
	}
	plan, err := mig.NewPlan(st, want, mig.BusyFromProcesses(ps), mig.Options{Force: *force})
	if err != nil {
		return err
	}
	if sub == "plan" {
		return printMig(stdout, sub, mig.Result{Plan: plan, State: st}, *output, "node")
	}
	res, err := newMIGApplier(lib, sim, *journal, *resetGPUs, nil).Apply(ctx, st, want, plan)
	if err != nil {
		return err
	}
	return printMig(stdout, sub, res, *output, "node")
}

// newMIGApplier is the applier the CLI and the agent share: with a journal
// file when journal is set, and resetting idle GPUs whose MIG mode change
// needs it when reset is true. log may be nil.
func newMIGApplier(lib nvml.Interface, sim *simnode.Node, journal string, reset bool, log *slog.Logger) *mig.Applier {
	var opts []mig.ApplierOption
	if journal != "" {
		opts = append(opts, mig.WithJournal(journal))
	}
	if reset {
		opts = append(opts, mig.WithResetter(resetter(sim)))
	}
	return mig.NewApplier(lib, log, opts...)
}

// resetter resets a GPU: the simulated node's ResetGPU, or nvidia-smi -r.
func resetter(sim *simnode.Node) func(int) error {
	if sim != nil {
		return sim.ResetGPU
	}
	return func(gpu int) error {
		out, err := exec.Command("nvidia-smi", "-r", "-i", strconv.Itoa(gpu)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("nvidia-smi -r -i %d: %w: %s", gpu, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
}

func migShow(nf nvmlFlags, w io.Writer, output string) error {
	lib, _, closeLib, err := openNVML(nf)
	if err != nil {
		return err
	}
	defer closeLib()
	st, err := mig.ReadState(lib)
	if err != nil {
		return err
	}
	if output == "json" {
		return writeJSON(w, st)
	}
	for _, g := range st.GPUs {
		fmt.Fprintf(w, "GPU %d %s: %s\n", g.Index, g.UUID, migModeText(g))
		for _, in := range g.Instances {
			fmt.Fprintf(w, "  %-10s at %s  gi %d  %s\n", in.Profile, in.Placement, in.GIID, strings.Join(in.UUIDs(), ","))
		}
	}
	return nil
}

func migModeText(g mig.GPUState) string {
	switch {
	case !g.MIGCapable:
		return "no MIG"
	case g.Pending():
		return fmt.Sprintf("MIG %s, %s after reset", onOff(g.MIGEnabled), onOff(g.PendingEnabled))
	}
	return "MIG " + onOff(g.MIGEnabled)
}

func onOff(b bool) string {
	if b {
		return "enabled"
	}
	return "disabled"
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printMig prints a plan (or what an apply did) GPU by GPU.
func printMig(w io.Writer, sub string, res mig.Result, output, via string) error {
	if output == "json" {
		return writeJSON(w, res)
	}
	p := res.Plan
	verb := map[string]string{"plan": "Plan", "apply": "Applied"}[sub]
	fmt.Fprintf(w, "%s for layout %q (%s): %d GPUs change", verb, p.Config, via, len(p.GPUs))
	if len(p.Unchanged) > 0 {
		fmt.Fprintf(w, ", unchanged: %s", joinInts(p.Unchanged))
	}
	fmt.Fprintln(w)
	for _, g := range p.GPUs {
		fmt.Fprintf(w, "GPU %d %s\n", g.GPU, g.UUID)
		if g.Pending != "" {
			fmt.Fprintf(w, "  pending: %s\n", g.Pending)
		}
		if len(g.Keep) > 0 {
			keep := make([]string, len(g.Keep))
			for i, in := range g.Keep {
				keep[i] = in.Profile + "@" + in.Placement.String()
			}
			fmt.Fprintf(w, "  keep %s\n", strings.Join(keep, ", "))
		}
		for _, s := range g.Steps {
			fmt.Fprintf(w, "  %s\n", strings.TrimPrefix(s.String(), fmt.Sprintf("gpu %d: ", g.GPU)))
		}
	}
	if sub == "apply" {
		for _, gpu := range slices.Sorted(maps.Keys(res.Pending)) {
			fmt.Fprintf(w, "GPU %d pending: %s; reset it (or rerun with --reset-gpus) and apply again\n", gpu, res.Pending[gpu])
		}
	}
	return nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}
