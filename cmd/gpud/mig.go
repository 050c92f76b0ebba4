package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/internal/wait"
	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/mig/migctl"
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
it (its --journal defaults to the agent's ` + defaultMIGJournal + `), apply
refuses to start over it, and recover finishes it (or, with --rollback,
puts its GPUs back to the layout before it), without an agent. An agent
started with --mig-journal J finishes it when it starts.`

// defaultMIGJournal is the agent's --mig-journal default, where `gpud mig
// show` looks for an interrupted apply unless --journal says otherwise.
const defaultMIGJournal = "/var/lib/gpud/mig-journal.json"

// migCLI is what `gpud mig plan|apply|show` was asked to do.
type migCLI struct {
	sub       string
	nvml      nvmlFlags
	file      string
	name      string
	force     bool
	resetGPUs bool
	socket    string
	podSocket string
	journal   string
	rollback  bool
	output    string
}

// runMig implements `gpud mig ...`: through the running agent when there
// is one, else through the same MIG service on NVML directly.
func runMig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseMigArgs(args, stdout, stderr)
	if c == nil || err != nil {
		return err
	}
	switch c.sub {
	case "show":
		return migShow(c.nvml, c.journal, stdout, c.output)
	case "recover":
		res, did, err := c.recover(ctx)
		if err != nil || !did {
			if err == nil {
				fmt.Fprintf(stderr, "gpud: no interrupted apply: no journal at %s\n", c.journal)
			}
			return err
		}
		return printMig(stdout, c.sub, res, c.output, "node")
	}
	data, err := fileio.ReadFile(c.file, fileio.MaxConfigBytes)
	if err != nil {
		return fmt.Errorf("mig: -f: %w", err)
	}
	layouts, err := mig.ParseLayoutFile(data)
	if err != nil {
		return fmt.Errorf("%s: %s", c.file, printable.Text(err.Error()))
	}
	if c.nvml.simulate == "" {
		res, err := c.viaAgent(ctx, data)
		if err == nil {
			return printMig(stdout, c.sub, res, c.output, "agent")
		}
		if !errors.Is(err, adminapi.ErrNoAgent) {
			return err
		}
		if res, answered, err := c.waitAgentGone(ctx, data, stderr); answered {
			if err != nil {
				return err
			}
			return printMig(stdout, c.sub, res, c.output, "agent")
		}
		fmt.Fprintf(stderr, "gpud: no agent listening on %s; using NVML directly\n", c.socket)
	}
	res, err := c.viaNVML(ctx, layouts, stderr)
	if err != nil {
		return err
	}
	return printMig(stdout, c.sub, res, c.output, "node")
}

// parseMigArgs parses the subcommand and its flags; nil, nil after help.
func parseMigArgs(args []string, stdout, stderr io.Writer) (*migCLI, error) {
	if len(args) == 0 {
		fmt.Fprintln(stderr, migUsage)
		return nil, errors.New("mig: missing subcommand")
	}
	c := &migCLI{sub: args[0]}
	switch c.sub {
	case "plan", "apply", "show", "recover":
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, migUsage)
		return nil, nil
	default:
		fmt.Fprintln(stderr, migUsage)
		return nil, fmt.Errorf("mig: unknown subcommand %s", printable.Quote(c.sub))
	}
	fs := flag.NewFlagSet("gpud mig "+c.sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.nvml.register(fs)
	fs.StringVar(&c.file, "f", "", "layout file (mig-parted format)")
	fs.StringVar(&c.name, "c", "", "name of the layout in the file (a key of mig-configs)")
	fs.BoolVar(&c.force, "force", false, "destroy slices even when allocated or running processes, or when that cannot be checked")
	fs.BoolVar(&c.resetGPUs, "reset-gpus", false, "without an agent: reset idle GPUs whose MIG mode change needs it (simulated: ResetGPU; real: nvidia-smi -r)")
	fs.StringVar(&c.socket, "admin-socket", adminapi.DefaultSocket, "the agent's admin socket")
	fs.StringVar(&c.podSocket, "pod-resources-socket", podresources.DefaultSocket, "without an agent: the kubelet's PodResources socket, to keep slices allocated to pods (absent: no kubelet, nothing allocated)")
	fs.StringVar(&c.journal, "journal", "", "without an agent: file recording the apply in progress (see the agent's --mig-journal); show reads "+defaultMIGJournal+" when not set")
	fs.BoolVar(&c.rollback, "rollback", false, "recover: put the GPUs of the interrupted apply back to the layout before it, instead of finishing it")
	fs.StringVar(&c.output, "o", "text", "output: text or json")
	if err := parseOnlyFlags(fs, args[1:]); err != nil {
		return nil, fmt.Errorf("mig %s: %w", c.sub, err)
	}
	if c.output != "text" && c.output != "json" {
		return nil, fmt.Errorf("mig: -o %s: want text or json", printable.Quote(c.output))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case c.sub == "show" && !set["journal"]:
		c.journal = defaultMIGJournal
	case c.sub == "recover" && c.journal == "":
		return nil, errors.New("mig recover: --journal FILE is required (the journal of the interrupted apply; the agent's is " + defaultMIGJournal + ")")
	case c.sub == "recover" || c.sub == "show":
	case c.file == "" || c.name == "":
		return nil, fmt.Errorf("mig %s: -f FILE and -c NAME are required", c.sub)
	}
	if c.rollback && c.sub != "recover" {
		return nil, fmt.Errorf("mig %s: --rollback is for recover", c.sub)
	}
	return c, nil
}

// viaAgent asks the running agent. It returns an error wrapping
// adminapi.ErrNoAgent only when no agent listens (no socket, or nothing
// accepts on it), the one case where falling back to NVML is safe.
func (c *migCLI) viaAgent(ctx context.Context, layouts []byte) (mig.Result, error) {
	var res mig.Result
	err := adminapi.NewClient(c.socket, 0).Call(ctx, "POST", "/v1/mig/"+c.sub, migctl.Request{Layouts: string(layouts), Config: c.name, Force: c.force}, &res)
	switch {
	case err == nil, errors.Is(err, adminapi.ErrNoAgent):
		return res, err
	case errors.Is(err, adminapi.ErrAgentClosed):
		return res, fmt.Errorf("mig %s: the agent on %s closed the connection mid-request (it stopped or crashed; check its log). "+
			"The layout may or may not be applied: run `gpud mig show` to see the GPUs and `gpud mig plan -f %s -c %s` to see what is left", c.sub, c.socket, c.file, c.name)
	}
	var ae *adminapi.Error
	if errors.As(err, &ae) {
		return res, fmt.Errorf("mig %s via the agent: %s", c.sub, printable.Text(ae.Message))
	}
	return res, fmt.Errorf("mig %s via the agent on %s: %w", c.sub, c.socket, err)
}

// agentGoneWait is how long `gpud mig` waits for a socket that refuses
// connections to go away: an agent shutting down stops accepting at once
// and removes its socket within 5 seconds, after its last apply ended.
var agentGoneWait = 6 * time.Second

// waitAgentGone handles a socket file that nobody accepts on: an agent
// shutting down (its apply may still run), or one that crashed. It waits
// up to agentGoneWait for the socket to go away, asking again meanwhile in
// case an agent starts; answered is true when one did (res, err are its
// answer). Otherwise the caller may fall back to NVML.
func (c *migCLI) waitAgentGone(ctx context.Context, layouts []byte, stderr io.Writer) (res mig.Result, answered bool, err error) {
	if _, err := os.Stat(c.socket); err != nil {
		return res, false, nil // no socket: no agent
	}
	fmt.Fprintf(stderr, "gpud: the agent's socket %s exists but nobody accepts on it (an agent shutting down, or a stale socket); waiting up to %s\n", c.socket, agentGoneWait)
	deadline := time.Now().Add(agentGoneWait)
	for time.Now().Before(deadline) {
		if !wait.Sleep(ctx, 100*time.Millisecond) {
			return res, true, ctx.Err()
		}
		if _, err := os.Stat(c.socket); err != nil {
			return res, false, nil
		}
		res, err = c.viaAgent(ctx, layouts)
		if !errors.Is(err, adminapi.ErrNoAgent) {
			return res, true, err
		}
	}
	fmt.Fprintf(stderr, "gpud: %s is a stale socket (no agent answered for %s)\n", c.socket, agentGoneWait)
	return res, false, nil
}

// viaNVML plans (and applies) through the MIG service on NVML, with the
// same busy source as the agent: processes and the kubelet's allocations.
func (c *migCLI) viaNVML(ctx context.Context, layouts mig.LayoutFile, stderr io.Writer) (mig.Result, error) {
	lib, sim, closeLib, err := openNVML(c.nvml)
	if err != nil {
		return mig.Result{}, err
	}
	defer closeLib()
	return c.onNVML(ctx, lib, sim, layouts, stderr)
}

// onNVML is viaNVML on an open NVML; sim is the simulated node or nil. On
// a simulated node, an apply (or reset) whose state file could not be
// written is an error: the simulated GPUs changed, but the layout is lost
// when the command exits, so it must not report "Applied".
func (c *migCLI) onNVML(ctx context.Context, lib nvml.Interface, sim *simnode.Node, layouts mig.LayoutFile, stderr io.Writer) (mig.Result, error) {
	var allocs mig.AllocationLister
	if c.podSocket == "" {
		fmt.Fprintln(stderr, "gpud: --pod-resources-socket is empty: the kubelet's allocations are not checked")
	} else {
		pods := podresources.New(c.podSocket)
		defer pods.Close()
		if _, err := os.Stat(c.podSocket); errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(stderr, "gpud: no kubelet PodResources socket at %s: no slice counts as allocated to a pod\n", c.podSocket)
		}
		allocs = pods
	}
	if c.sub == "apply" && c.journal != "" {
		if err := refuseOverJournal(c.journal); err != nil {
			return mig.Result{}, err
		}
	}
	svc, err := newMIGService(lib, sim, c.journal, c.resetGPUs, allocs, nil, nil)
	if err != nil {
		return mig.Result{}, err
	}
	run := svc.Plan
	if c.sub == "apply" {
		run = svc.Apply
	}
	res, err := run(ctx, layouts, c.name, c.force)
	if errors.Is(err, mig.ErrBadLayout) || errors.Is(err, mig.ErrUnknownProfile) {
		err = fmt.Errorf("%s: %w", c.file, err)
	}
	if sim != nil && c.sub == "apply" {
		if serr := sim.StateErr(); serr != nil {
			err = errors.Join(err, fmt.Errorf("mig apply: the simulated GPUs changed, but --sim-state-file %s was not written, so the change is lost when gpud exits: %w", c.nvml.stateFile, serr))
		}
	}
	return res, err
}

// refuseOverJournal refuses an apply while an earlier one's journal is
// there: the new apply would overwrite it, and the layout before the
// interrupted apply (its rollback target) would be lost. A temp file a
// kill during the journal's own write left records nothing that
// happened (the journal is written before any change) and is removed.
func refuseOverJournal(journal string) error {
	in, err := mig.ReadJournal(journal)
	if err != nil {
		return err // names the journal and what to do
	}
	if in != nil {
		return fmt.Errorf("mig apply: an earlier apply of layout %q was interrupted (journal %s; GPUs %s may be half-applied): "+
			"finish it with `gpud mig recover --journal %s` or undo it with `gpud mig recover --rollback --journal %s` (same --simulate flags), then apply again",
			in.Config, journal, joinInts(in.GPUs), journal, journal)
	}
	if err := os.Remove(fileio.TempName(journal)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("mig apply: remove the temp file a killed journal write left: %w", err)
	}
	return nil
}

// recover finishes (or, with --rollback, undoes) the apply the journal
// records, on NVML directly; with no journal there is nothing to do.
func (c *migCLI) recover(ctx context.Context) (res mig.Result, did bool, err error) {
	lib, sim, closeLib, err := openNVML(c.nvml)
	if err != nil {
		return mig.Result{}, false, err
	}
	defer closeLib()
	var allocs mig.AllocationLister
	if c.podSocket != "" {
		pods := podresources.New(c.podSocket)
		defer pods.Close()
		allocs = pods
	}
	svc, err := newMIGService(lib, sim, c.journal, c.resetGPUs, allocs, nil, nil)
	if err != nil {
		return mig.Result{}, false, err
	}
	if c.rollback {
		did, res, err = svc.RollBack(ctx, c.force)
	} else {
		did, res, err = svc.Recover(ctx)
	}
	if sim != nil {
		if serr := sim.StateErr(); serr != nil {
			err = errors.Join(err, fmt.Errorf("mig recover: --sim-state-file %s was not written: %w", c.nvml.stateFile, serr))
		}
	}
	return res, did, err
}

// newMIGService is the MIG service the CLI and the agent share: one busy
// source (processes and, through allocs, the kubelet's allocations), a
// journal file when journal is set, GPU resets when reset is true.
// changed and log may be nil.
func newMIGService(lib nvml.Interface, sim *simnode.Node, journal string, reset bool, allocs mig.AllocationLister, changed func(mig.Result), log *slog.Logger) (*mig.Service, error) {
	var opts []mig.ApplierOption
	if journal != "" {
		opts = append(opts, mig.WithJournal(journal))
	}
	if reset {
		opts = append(opts, mig.WithResetter(resetter(sim)))
	}
	return mig.NewService(mig.ServiceConfig{
		Lib: lib, Applier: mig.NewApplier(lib, log, opts...),
		Processes: discovery.ProcessReader{Lib: lib}, Allocations: allocs,
		Changed: changed, Log: log,
	})
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

// migShowJSON is `gpud mig show -o json`: the state, plus the interrupted
// apply when a journal records one (absent otherwise, so the output stays
// a mig.State for readers that know no more).
type migShowJSON struct {
	mig.State
	InterruptedApply *mig.Interrupted `json:"interruptedApply,omitempty"`
	JournalError     string           `json:"journalError,omitempty"`
}

// migShow prints the GPUs' MIG state and, when journal records an apply
// that was cut short, says so and how to finish or undo it: the layout
// shown is then half-applied.
func migShow(nf nvmlFlags, journal string, w io.Writer, output string) error {
	lib, _, closeLib, err := openNVML(nf)
	if err != nil {
		return err
	}
	defer closeLib()
	st, err := mig.ReadState(lib)
	if err != nil {
		return err
	}
	var in *mig.Interrupted
	var jerr error
	if journal != "" {
		in, jerr = mig.ReadJournal(journal)
	}
	if output == "json" {
		out := migShowJSON{State: st, InterruptedApply: in}
		if jerr != nil {
			out.JournalError = jerr.Error()
		}
		return writeJSON(w, out)
	}
	if jerr != nil {
		fmt.Fprintf(w, "WARNING: %v\n", jerr)
	}
	if in != nil {
		fmt.Fprintf(w, "INTERRUPTED: an apply of layout %q was cut short (journal %s): GPUs %s may be half-applied.\n", in.Config, in.Journal, joinInts(in.GPUs))
		fmt.Fprintf(w, "  finish it:    gpud mig recover --journal %s\n", in.Journal)
		fmt.Fprintf(w, "  roll it back: gpud mig recover --rollback --journal %s\n", in.Journal)
		fmt.Fprintf(w, "  (with the same --simulate flags; an agent started with --mig-journal %s finishes it when it starts)\n", in.Journal)
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
	verb := map[string]string{"plan": "Plan", "apply": "Applied", "recover": "Recovered"}[sub]
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
