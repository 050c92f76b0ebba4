package migcli

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/simnode"
)

const layouts = `version: v1
mig-configs:
  two-3g:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
`

// simOpener opens a simulated A100 node kept in stateFile.
func simOpener(stateFile string) Opener {
	return func() (nvml.Interface, *simnode.Node, func(), error) {
		n := simnode.NewBuiltin("dgx-a100", simnode.WithStateFile(stateFile))
		return n, n, func() {}, nil
	}
}

// TestStateFileBecomesUnwritable: an apply on a simulated node whose
// state file was writable when the node was opened, not after, fails
// naming the file (simnode.ErrStateFile) instead of printing "Applied"
// for a layout that is gone when gpud exits.
func TestStateFileBecomesUnwritable(t *testing.T) {
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(stateDir, "node.json")
	c := &Command{Sub: "apply", File: "layouts.yaml", Config: "two-3g", ResetGPUs: true, Output: "text",
		Simulated: true, StateFile: state, Open: simOpener(state)}
	lib, sim, closeLib, err := c.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer closeLib()
	if err := os.RemoveAll(stateDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stateDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := mig.ParseLayoutFile([]byte(layouts))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.onNVML(t.Context(), lib, sim, f, io.Discard)
	if !errors.Is(err, simnode.ErrStateFile) || !strings.Contains(err.Error(), "--sim-state-file "+state) {
		t.Fatalf("apply after the state file became unwritable = %v, want simnode.ErrStateFile naming the file", err)
	}
}

// TestRunPlanApplyShow: on a simulated node, plan prints the change,
// apply makes it, show reports the slices, and a second plan has nothing
// left to do.
func TestRunPlanApplyShow(t *testing.T) {
	dir := t.TempDir()
	file, state := filepath.Join(dir, "layouts.yaml"), filepath.Join(dir, "node.json")
	if err := os.WriteFile(file, []byte(layouts), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(sub string) string {
		t.Helper()
		var out bytes.Buffer
		c := &Command{Sub: sub, File: file, Config: "two-3g", ResetGPUs: true, Output: "text", Simulated: true, StateFile: state, Open: simOpener(state)}
		if err := Run(t.Context(), c, &out, io.Discard); err != nil {
			t.Fatalf("mig %s: %v", sub, err)
		}
		return out.String()
	}
	if out := run("plan"); !strings.HasPrefix(out, `Plan for layout "two-3g" (node): 1 GPUs change`) {
		t.Fatalf("plan printed %q, want one GPU to change", out)
	}
	if out := run("apply"); !strings.HasPrefix(out, `Applied for layout "two-3g" (node): 1 GPUs change`) {
		t.Fatalf("apply printed %q, want one GPU changed", out)
	}
	if out := run("show"); strings.Count(out, "3g.20gb") != 2 {
		t.Fatalf("show printed %q, want two 3g.20gb slices", out)
	}
	if out := run("plan"); !strings.HasPrefix(out, `Plan for layout "two-3g" (node): 0 GPUs change`) {
		t.Fatalf("plan after apply printed %q, want nothing left to change", out)
	}
}

// TestValidate: each bad command is refused with what is missing.
func TestValidate(t *testing.T) {
	open := simOpener("")
	tests := []struct {
		name string
		c    Command
		want string // "" = valid
	}{
		{name: "plan", c: Command{Sub: "plan", File: "f", Config: "c", Output: "text", Open: open}},
		{name: "show", c: Command{Sub: "show", Output: "json", Open: open}},
		{name: "plan without -c", c: Command{Sub: "plan", File: "f", Output: "text", Open: open}, want: "-f FILE and -c NAME are required"},
		{name: "recover without journal", c: Command{Sub: "recover", Output: "text", Open: open}, want: "--journal FILE is required"},
		{name: "rollback on apply", c: Command{Sub: "apply", File: "f", Config: "c", Rollback: true, Output: "text", Open: open}, want: "--rollback is for recover"},
		{name: "bad output", c: Command{Sub: "show", Output: "yaml", Open: open}, want: `-o "yaml": want text or json`},
		{name: "unknown subcommand", c: Command{Sub: "destroy", Output: "text", Open: open}, want: "unknown subcommand"},
		{name: "no opener", c: Command{Sub: "show", Output: "text"}, want: "no NVML opener"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}
