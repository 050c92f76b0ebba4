package test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// usage is flag.PrintDefaults output in the form gpud prints it.
const usage = `Usage of gpud agent:
  -admin-socket string
    	unix socket of the local admin API; empty disables it (default "/run/gpud/admin.sock")
  -config string
    	agent config file (YAML; keys are flag names, flags on the command line win)
  -http-addr string
    	address of the HTTP server; empty disables it (default "127.0.0.1:9400")
  -mig-force
    	let the configured layout destroy MIG slices
  -mig-journal string
    	file recording an apply in progress (default "/var/lib/gpud/mig-journal.json")
  -proc-root string
    	the host's /proc (GPU processes are host PIDs) (default "/proc")
  -rediscover-interval duration
    	how often to reread the GPU inventory (default 30s)
  -node-name string
    	node name to report (default: $NODE_NAME, else the hostname)
`

func TestParseFlags(t *testing.T) {
	got := parseFlags(usage)
	want := map[string]gpudFlag{
		"admin-socket":        {def: "/run/gpud/admin.sock"},
		"config":              {},
		"http-addr":           {def: "127.0.0.1:9400"},
		"mig-force":           {bool: true},
		"mig-journal":         {def: "/var/lib/gpud/mig-journal.json"},
		"proc-root":           {def: "/proc"},
		"rediscover-interval": {def: "30s"},
		"node-name":           {},
	}
	if len(got) != len(want) {
		t.Errorf("parsed %d flags %v, want %d", len(got), got, len(want))
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("flag %s = %+v (found %v), want %+v", name, g, ok, w)
		}
	}
}

func TestSandboxArgs(t *testing.T) {
	flags := parseFlags(usage)
	dir := t.TempDir()
	tests := []struct {
		name    string
		args    []string
		want    []string // exactly, with dir for $D
		wantErr string
	}{
		{name: "every host default moved under dir, the address to port 0",
			args: []string{"agent", "--config", "$D/agent.yaml"},
			want: []string{"agent", "--admin-socket=$D/h/run/gpud/admin.sock", "--http-addr=127.0.0.1:0",
				"--mig-journal=$D/h/var/lib/gpud/mig-journal.json", "--proc-root=$D/h/proc", "--config", "$D/agent.yaml"}},
		{name: "set flags are kept, in both spellings, with bool flags",
			args: []string{"agent", "--mig-force", "-admin-socket=$D/a.sock", "--http-addr", "", "--proc-root", "$D/p", "--mig-journal", ""},
			want: []string{"agent", "--mig-force", "-admin-socket=$D/a.sock", "--http-addr", "", "--proc-root", "$D/p", "--mig-journal", ""}},
		{name: "host path refused", args: []string{"agent", "--admin-socket", "/run/gpud/admin.sock"},
			wantErr: "--admin-socket /run/gpud/admin.sock is outside the test's dir"},
		{name: "host path refused with =", args: []string{"agent", "--mig-journal=/var/lib/gpud/j.json"},
			wantErr: "--mig-journal /var/lib/gpud/j.json is outside the test's dir"},
		{name: "escape through .. refused", args: []string{"agent", "--proc-root", "$D/../proc"},
			wantErr: "is outside the test's dir"},
		{name: "other path flags must stay in the temp dir", args: []string{"agent", "--config", "/etc/gpud/agent.yaml"},
			wantErr: "--config /etc/gpud/agent.yaml is outside the temp dir"},
		{name: "unknown flag refused", args: []string{"agent", "--pod-resources-sock", "$D/x"},
			wantErr: "unknown flag --pod-resources-sock"},
		{name: "missing value refused", args: []string{"agent", "--admin-socket"}, wantErr: "needs a value"},
	}
	expand := func(ss []string) []string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = strings.ReplaceAll(s, "$D", dir)
		}
		return out
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sandboxArgs(flags, dir, expand(tc.args))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("sandboxArgs = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := expand(tc.want); !slices.Equal(got, want) {
				t.Fatalf("sandboxArgs =\n%q\nwant\n%q", got, want)
			}
		})
	}
	for _, d := range []string{"h/run/gpud", "h/var/lib/gpud", "h/proc"} {
		if fi, err := os.Stat(filepath.Join(dir, d)); err != nil || !fi.IsDir() {
			t.Errorf("%s not created under the test dir: %v", d, err)
		}
	}
}

// TestGpudHostPathFlags reads the real binary's flags: the ones known to
// default to host paths must be seen as such (so the parser still reads
// gpud's -h output), and sandboxing leaves none of them on the host.
func TestGpudHostPathFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gpud binary")
	}
	bin := buildGpud(t)
	tests := []struct {
		sub       []string
		wantHost  []string
		wantAddrs []string
	}{
		{sub: []string{"agent"}, wantAddrs: []string{"http-addr"},
			wantHost: []string{"admin-socket", "mig-journal", "pod-resources-socket", "device-plugin-dir", "cdi-dir", "proc-root", "pod-logs-root"}},
		{sub: []string{"mig", "apply"}, wantHost: []string{"admin-socket"}},
		{sub: []string{"mig", "plan"}, wantHost: []string{"admin-socket"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.sub, " "), func(t *testing.T) {
			flags := gpudFlags(t, bin, tc.sub)
			for _, name := range tc.wantHost {
				if !flags[name].hostPath() {
					t.Errorf("--%s = %+v, want a host-path default", name, flags[name])
				}
			}
			for _, name := range tc.wantAddrs {
				if !flags[name].hostAddr() {
					t.Errorf("--%s = %+v, want a listen-address default", name, flags[name])
				}
			}
			dir := t.TempDir()
			args := gpudArgs(t, bin, dir, tc.sub...)
			for _, a := range args[len(tc.sub):] {
				name, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if f := flags[name]; f.hostPath() && !under(val, dir) {
					t.Errorf("--%s=%s is not under the test dir", name, val)
				}
			}
			for name, f := range flags {
				if f.hostPath() && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--"+name+"=") }) {
					t.Errorf("host-path flag --%s (default %s) not sandboxed: %q", name, f.def, args)
				}
			}
		})
	}
}

// TestProcessesOnlyThroughSandbox keeps the guard above from being walked
// around: outside gpud_test.go no test in this package starts a process
// itself, so every gpud run goes through gpud() or startAgent().
func TestProcessesOnlyThroughSandbox(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	// Files that start processes other than gpud's own runs, each checked
	// another way: readme_test.go runs `make run` and the README's
	// commands in a fresh checkout whose paths are all inside it (make
	// test's host-path check still watches); node_daemonset_test.go runs
	// hack/image, whose output goes to the node's temp dir.
	otherProcesses := map[string]bool{"readme_test.go": true, "node_daemonset_test.go": true}
	fset := token.NewFileSet()
	for _, f := range files {
		if f == "gpud_test.go" || otherProcesses[f] {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "exec" && strings.HasPrefix(sel.Sel.Name, "Command") {
				t.Errorf("%s: exec.%s outside gpud_test.go: run gpud through gpud() or startAgent(), which keep its host paths in the test's dir",
					fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}
