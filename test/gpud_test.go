package test

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The tests in this file's helpers run the gpud binary. Every invocation
// goes through gpudArgs, which points each flag whose default is a host
// path (the admin socket under /run/gpud, the MIG journal under
// /var/lib/gpud, the kubelet's sockets, /proc, ...) into the test's temp
// dir, so no test touches the host or a running agent. The flags are read
// from the binary's own -h output: a host-path flag added later is covered
// without a change here.

// binDir holds the gpud binary built once for the whole test run.
var binDir string

// TestMain removes the gpud binary the tests built.
//
// Tests that start only processes of their own (etcd, kube-apiserver,
// schedulers and agents on free loopback ports, files under t.TempDir) call
// t.Parallel: they run after the sequential tests, -parallel (GOMAXPROCS)
// at a time, which shortens the suite because most of their time is spent
// waiting on the API server. Tests of a real node (test/nodeenv: kubelet,
// containerd and one shared pod network) and the fresh-checkout test, which
// compiles gpud, stay sequential.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var build struct {
	once sync.Once
	bin  string
	err  error
}

// buildGpud returns the gpud binary, built once per test run.
func buildGpud(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain to build gpud")
	}
	build.once.Do(func() {
		dir, err := os.MkdirTemp("", "gpud-bin")
		if err != nil {
			build.err = err
			return
		}
		binDir = dir
		bin := filepath.Join(dir, "gpud")
		cmd := exec.Command("go", "build", "-o", bin, "../cmd/gpud")
		cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		build.bin = bin
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.bin
}

// gpudFlag is one flag of a gpud subcommand, as its -h output lists it.
type gpudFlag struct {
	bool bool   // takes no value
	def  string // the default, "" when none is printed
}

// hostPath reports whether the flag's default names a path on the host.
func (f gpudFlag) hostPath() bool { return strings.HasPrefix(f.def, "/") }

// hostAddr reports whether the flag's default is a TCP address to listen
// on (a fixed host port would collide with a running agent).
func (f gpudFlag) hostAddr() bool {
	return regexp.MustCompile(`^[0-9.]*:[0-9]+$`).MatchString(f.def)
}

var (
	flagLine = regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9._-]*)(?: (\S+))?$`)
	// flag.PrintDefaults quotes string defaults: (default "/run/gpud/admin.sock").
	quotedDefault = regexp.MustCompile(`\(default "([^"]*)"\)`)
	// and prints other types bare: (default 5m0s).
	bareDefault = regexp.MustCompile(`\(default ([^":)][^)]*)\)`)
)

// parseFlags reads the flags of flag.PrintDefaults output.
func parseFlags(usage string) map[string]gpudFlag {
	flags := map[string]gpudFlag{}
	var name string
	sc := bufio.NewScanner(strings.NewReader(usage))
	for sc.Scan() {
		line := sc.Text()
		if m := flagLine.FindStringSubmatch(line); m != nil {
			name = m[1]
			flags[name] = gpudFlag{bool: m[2] == ""}
			continue
		}
		if name == "" || !strings.HasPrefix(line, "    \t") {
			continue
		}
		f := flags[name]
		if m := quotedDefault.FindStringSubmatch(line); m != nil {
			f.def = m[1]
		} else if m := bareDefault.FindStringSubmatch(line); m != nil {
			f.def = m[1]
		}
		flags[name] = f
	}
	return flags
}

var usageCache sync.Map // "bin\x00sub" -> map[string]gpudFlag

// gpudFlags returns the flags of `gpud sub...` from its -h output.
func gpudFlags(t *testing.T, bin string, sub []string) map[string]gpudFlag {
	t.Helper()
	key := bin + "\x00" + strings.Join(sub, " ")
	if f, ok := usageCache.Load(key); ok {
		return f.(map[string]gpudFlag)
	}
	out, _ := exec.Command(bin, append(append([]string(nil), sub...), "-h")...).CombinedOutput() // -h exits non-zero
	flags := parseFlags(string(out))
	if len(flags) == 0 {
		t.Fatalf("gpud %s -h lists no flags:\n%s", strings.Join(sub, " "), out)
	}
	usageCache.Store(key, flags)
	return flags
}

// splitCommand splits `gpud` arguments into the subcommand words and the
// flags after them.
func splitCommand(args []string) (sub, flags []string) {
	for i, a := range args {
		if strings.HasPrefix(a, "-") {
			return args[:i], args[i:]
		}
	}
	return args, nil
}

// under reports whether path is dir or inside it.
func under(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// sandboxArgs returns `gpud` arguments (subcommand words first) with every
// host-path flag that args leave unset set to the same path under
// dir/h, whose parent dirs it creates, and every unset listen address set
// to 127.0.0.1:0. It refuses args that set a host-path flag to an
// absolute path outside dir, or any flag to an absolute path outside the
// temp dir. An empty value (which disables most of those components) is
// allowed.
func sandboxArgs(flags map[string]gpudFlag, dir string, args []string) ([]string, error) {
	sub, rest := splitCommand(args)
	set := map[string]bool{}
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			break // flag parsing stops here
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f, ok := flags[name]
		if !ok {
			return nil, fmt.Errorf("unknown flag %s for gpud %s", a, strings.Join(sub, " "))
		}
		if !hasVal && !f.bool {
			if i+1 == len(rest) {
				return nil, fmt.Errorf("flag %s needs a value", a)
			}
			i++
			val = rest[i]
		}
		set[name] = true
		switch {
		case !filepath.IsAbs(val):
		case f.hostPath() && !under(val, dir):
			return nil, fmt.Errorf("--%s %s is outside the test's dir %s", name, val, dir)
		case !under(val, os.TempDir()):
			return nil, fmt.Errorf("--%s %s is outside the temp dir %s", name, val, os.TempDir())
		}
	}
	out := append([]string(nil), sub...)
	for _, name := range slices.Sorted(maps.Keys(flags)) {
		f := flags[name]
		if set[name] {
			continue
		}
		switch {
		case f.hostPath():
			p := filepath.Join(dir, "h", f.def)
			mk := p // a dir flag: the dir itself
			if filepath.Ext(p) != "" {
				mk = filepath.Dir(p) // a file or socket: its parent
			}
			if err := os.MkdirAll(mk, 0o755); err != nil {
				return nil, err
			}
			out = append(out, "--"+name+"="+p)
		case f.hostAddr():
			out = append(out, "--"+name+"=127.0.0.1:0")
		}
	}
	return append(out, rest...), nil
}

// gpudArgs is sandboxArgs for bin's flags, failing the test on a refusal.
func gpudArgs(t *testing.T, bin, dir string, args ...string) []string {
	t.Helper()
	sub, _ := splitCommand(args)
	out, err := sandboxArgs(gpudFlags(t, bin, sub), dir, args)
	if err != nil {
		t.Fatalf("gpud %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// gpud runs `gpud args...` with its host paths under dir and returns its
// combined output.
func gpud(t *testing.T, bin, dir string, args ...string) ([]byte, error) {
	t.Helper()
	return exec.Command(bin, gpudArgs(t, bin, dir, args...)...).CombinedOutput()
}

// startAgent runs `gpud agent args...` with its host paths under dir until
// the test ends, and logs its output if the test failed.
func startAgent(t *testing.T, bin, dir string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	agent := exec.CommandContext(ctx, bin, gpudArgs(t, bin, dir, append([]string{"agent"}, args...)...)...)
	var logs strings.Builder // exec serializes writes: one writer for both
	agent.Stdout, agent.Stderr = &logs, &logs
	if err := agent.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = agent.Wait()
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})
}
