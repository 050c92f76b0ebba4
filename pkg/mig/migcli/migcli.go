// Package migcli is `gpud mig plan|apply|show|recover`: it asks the
// running agent over its admin socket when one listens, else runs the
// same MIG service ([mig.Service]) on NVML directly, and prints what was
// planned or done. It parses no flags and opens no NVML handle: the
// command comes parsed ([Command]) and NVML comes through [Opener].
package migcli

import (
	"context"
	"encoding/json"
	"errors"
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

// DefaultJournal is the agent's --mig-journal default, where `gpud mig
// show` looks for an interrupted apply unless --journal says otherwise.
const DefaultJournal = "/var/lib/gpud/mig-journal.json"

// Opener opens NVML: the library, the simulated node (nil on real
// hardware) and the function that closes both.
type Opener func() (nvml.Interface, *simnode.Node, func(), error)

// Command is what `gpud mig plan|apply|show|recover` was asked to do.
type Command struct {
	Sub       string // plan, apply, show or recover
	File      string // -f: the layout file (mig-parted format)
	Config    string // -c: the layout's name in File
	Force     bool
	ResetGPUs bool
	Socket    string // the agent's admin socket
	PodSocket string // the kubelet's PodResources socket; "" checks no allocation
	Journal   string
	Rollback  bool
	Output    string // text or json
	// Simulated is true on a simulated node (--simulate): plan and apply
	// go to NVML, never to an agent.
	Simulated bool
	// StateFile is the simulated node's state file, named in errors.
	StateFile string
	// Open opens NVML; required.
	Open Opener
	// AgentGoneWait bounds the wait for a socket nobody accepts on to go
	// away; zero is DefaultAgentGoneWait.
	AgentGoneWait time.Duration
}

// Validate checks that c names a subcommand with what it needs, and
// returns the first thing missing.
func (c *Command) Validate() error {
	if c.Output != "text" && c.Output != "json" {
		return fmt.Errorf("mig: -o %s: want text or json", printable.Quote(c.Output))
	}
	switch c.Sub {
	case "plan", "apply":
		if c.File == "" || c.Config == "" {
			return fmt.Errorf("mig %s: -f FILE and -c NAME are required", c.Sub)
		}
	case "recover":
		if c.Journal == "" {
			return errors.New("mig recover: --journal FILE is required (the journal of the interrupted apply; the agent's is " + DefaultJournal + ")")
		}
	case "show":
	default:
		return fmt.Errorf("mig: unknown subcommand %s", printable.Quote(c.Sub))
	}
	if c.Rollback && c.Sub != "recover" {
		return fmt.Errorf("mig %s: --rollback is for recover", c.Sub)
	}
	if c.Open == nil {
		return errors.New("mig: no NVML opener")
	}
	return nil
}

// Run does what c asks and prints the result to stdout (notes to
// stderr): plan and apply through the running agent when there is one,
// else through the same MIG service on NVML directly; show and recover
// on NVML.
func Run(ctx context.Context, c *Command, stdout, stderr io.Writer) error {
	if err := c.Validate(); err != nil {
		return err
	}
	switch c.Sub {
	case "show":
		return show(c.Open, c.Journal, stdout, c.Output)
	case "recover":
		res, did, err := c.recover(ctx)
		if err != nil || !did {
			if err == nil {
				fmt.Fprintf(stderr, "gpud: no interrupted apply: no journal at %s\n", c.Journal)
			}
			return err
		}
		return printResult(stdout, c.Sub, res, c.Output, "node")
	}
	data, err := fileio.ReadFile(c.File, fileio.MaxConfigBytes)
	if err != nil {
		return fmt.Errorf("mig: -f: %w", err)
	}
	layouts, err := mig.ParseLayoutFile(data)
	if err != nil {
		return fmt.Errorf("%s: %s", c.File, printable.Text(err.Error()))
	}
	if !c.Simulated {
		res, err := c.viaAgent(ctx, data)
		if err == nil {
			return printResult(stdout, c.Sub, res, c.Output, "agent")
		}
		if !errors.Is(err, adminapi.ErrNoAgent) {
			return err
		}
		if res, answered, err := c.waitAgentGone(ctx, data, stderr); answered {
			if err != nil {
				return err
			}
			return printResult(stdout, c.Sub, res, c.Output, "agent")
		}
		fmt.Fprintf(stderr, "gpud: no agent listening on %s; using NVML directly\n", c.Socket)
	}
	res, err := c.viaNVML(ctx, layouts, stderr)
	if err != nil {
		return err
	}
	return printResult(stdout, c.Sub, res, c.Output, "node")
}

// viaAgent asks the running agent. It returns an error wrapping
// adminapi.ErrNoAgent only when no agent listens (no socket, or nothing
// accepts on it), the one case where falling back to NVML is safe.
func (c *Command) viaAgent(ctx context.Context, layouts []byte) (mig.Result, error) {
	var res mig.Result
	err := adminapi.NewClient(c.Socket, 0).Call(ctx, "POST", "/v1/mig/"+c.Sub, migctl.Request{Layouts: string(layouts), Config: c.Config, Force: c.Force}, &res)
	switch {
	case err == nil, errors.Is(err, adminapi.ErrNoAgent):
		return res, err
	case errors.Is(err, adminapi.ErrAgentClosed):
		return res, fmt.Errorf("mig %s: the agent on %s closed the connection mid-request (it stopped or crashed; check its log). "+
			"The layout may or may not be applied: run `gpud mig show` to see the GPUs and `gpud mig plan -f %s -c %s` to see what is left", c.Sub, c.Socket, c.File, c.Config)
	}
	var ae *adminapi.Error
	if errors.As(err, &ae) {
		return res, fmt.Errorf("mig %s via the agent: %s", c.Sub, printable.Text(ae.Message))
	}
	return res, fmt.Errorf("mig %s via the agent on %s: %w", c.Sub, c.Socket, err)
}

// DefaultAgentGoneWait is how long `gpud mig` waits for a socket that
// refuses connections to go away: an agent shutting down stops accepting
// at once and removes its socket within 5 seconds, after its last apply
// ended.
const DefaultAgentGoneWait = 6 * time.Second

// waitAgentGone handles a socket file that nobody accepts on: an agent
// shutting down (its apply may still run), or one that crashed. It waits
// up to c.AgentGoneWait for the socket to go away, asking again meanwhile in
// case an agent starts; answered is true when one did (res, err are its
// answer). Otherwise the caller may fall back to NVML.
func (c *Command) waitAgentGone(ctx context.Context, layouts []byte, stderr io.Writer) (res mig.Result, answered bool, err error) {
	agentGoneWait := c.AgentGoneWait
	if agentGoneWait <= 0 {
		agentGoneWait = DefaultAgentGoneWait
	}
	if _, err := os.Stat(c.Socket); err != nil {
		return res, false, nil // no socket: no agent
	}
	fmt.Fprintf(stderr, "gpud: the agent's socket %s exists but nobody accepts on it (an agent shutting down, or a stale socket); waiting up to %s\n", c.Socket, agentGoneWait)
	deadline := time.Now().Add(agentGoneWait)
	for time.Now().Before(deadline) {
		if !wait.Sleep(ctx, 100*time.Millisecond) {
			return res, true, ctx.Err()
		}
		if _, err := os.Stat(c.Socket); err != nil {
			return res, false, nil
		}
		res, err = c.viaAgent(ctx, layouts)
		if !errors.Is(err, adminapi.ErrNoAgent) {
			return res, true, err
		}
	}
	fmt.Fprintf(stderr, "gpud: %s is a stale socket (no agent answered for %s)\n", c.Socket, agentGoneWait)
	return res, false, nil
}

// viaNVML plans (and applies) through the MIG service on NVML, with the
// same busy source as the agent: processes and the kubelet's allocations.
func (c *Command) viaNVML(ctx context.Context, layouts mig.LayoutFile, stderr io.Writer) (mig.Result, error) {
	lib, sim, closeLib, err := c.Open()
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
func (c *Command) onNVML(ctx context.Context, lib nvml.Interface, sim *simnode.Node, layouts mig.LayoutFile, stderr io.Writer) (mig.Result, error) {
	var allocs mig.AllocationLister
	if c.PodSocket == "" {
		fmt.Fprintln(stderr, "gpud: --pod-resources-socket is empty: the kubelet's allocations are not checked")
	} else {
		pods := podresources.New(c.PodSocket)
		defer pods.Close()
		if _, err := os.Stat(c.PodSocket); errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(stderr, "gpud: no kubelet PodResources socket at %s: no slice counts as allocated to a pod\n", c.PodSocket)
		}
		allocs = pods
	}
	if c.Sub == "apply" && c.Journal != "" {
		if err := refuseOverJournal(c.Journal); err != nil {
			return mig.Result{}, err
		}
	}
	svc, err := NewService(lib, sim, c.Journal, c.ResetGPUs, allocs, nil, nil)
	if err != nil {
		return mig.Result{}, err
	}
	run := svc.Plan
	if c.Sub == "apply" {
		run = svc.Apply
	}
	res, err := run(ctx, layouts, c.Config, c.Force)
	if errors.Is(err, mig.ErrBadLayout) || errors.Is(err, mig.ErrUnknownProfile) {
		err = fmt.Errorf("%s: %w", c.File, err)
	}
	if sim != nil && c.Sub == "apply" {
		if serr := sim.StateErr(); serr != nil {
			err = errors.Join(err, fmt.Errorf("mig apply: the simulated GPUs changed, but --sim-state-file %s was not written, so the change is lost when gpud exits: %w", c.StateFile, serr))
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
func (c *Command) recover(ctx context.Context) (res mig.Result, did bool, err error) {
	lib, sim, closeLib, err := c.Open()
	if err != nil {
		return mig.Result{}, false, err
	}
	defer closeLib()
	var allocs mig.AllocationLister
	if c.PodSocket != "" {
		pods := podresources.New(c.PodSocket)
		defer pods.Close()
		allocs = pods
	}
	svc, err := NewService(lib, sim, c.Journal, c.ResetGPUs, allocs, nil, nil)
	if err != nil {
		return mig.Result{}, false, err
	}
	if c.Rollback {
		did, res, err = svc.RollBack(ctx, c.Force)
	} else {
		did, res, err = svc.Recover(ctx)
	}
	if sim != nil {
		if serr := sim.StateErr(); serr != nil {
			err = errors.Join(err, fmt.Errorf("mig recover: --sim-state-file %s was not written: %w", c.StateFile, serr))
		}
	}
	return res, did, err
}

// NewService is the MIG service the CLI and the agent share: one busy
// source (processes and, through allocs, the kubelet's allocations), a
// journal file when journal is set, GPU resets when reset is true.
// changed and log may be nil.
func NewService(lib nvml.Interface, sim *simnode.Node, journal string, reset bool, allocs mig.AllocationLister, changed func(mig.Result), log *slog.Logger) (*mig.Service, error) {
	var opts []mig.ApplierOption
	if journal != "" {
		opts = append(opts, mig.WithJournal(journal))
	}
	if reset {
		opts = append(opts, mig.WithResetter(Resetter(sim)))
	}
	return mig.NewService(mig.ServiceConfig{
		Lib: lib, Applier: mig.NewApplier(lib, log, opts...),
		Processes: discovery.ProcessReader{Lib: lib}, Allocations: allocs,
		Changed: changed, Log: log,
	})
}

// Resetter resets a GPU: the simulated node's ResetGPU, or nvidia-smi -r.
func Resetter(sim *simnode.Node) func(int) error {
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

// ShowJSON is `gpud mig show -o json`: the state, plus the interrupted
// apply when a journal records one (absent otherwise, so the output stays
// a mig.State for readers that know no more).
type ShowJSON struct {
	mig.State
	InterruptedApply *mig.Interrupted `json:"interruptedApply,omitempty"`
	JournalError     string           `json:"journalError,omitempty"`
}

// show prints the GPUs' MIG state and, when journal records an apply
// that was cut short, says so and how to finish or undo it: the layout
// shown is then half-applied.
func show(open Opener, journal string, w io.Writer, output string) error {
	lib, _, closeLib, err := open()
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
		out := ShowJSON{State: st, InterruptedApply: in}
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

// printResult prints a plan (or what an apply did) GPU by GPU.
func printResult(w io.Writer, sub string, res mig.Result, output, via string) error {
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
