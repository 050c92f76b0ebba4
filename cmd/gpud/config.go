package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/goccy/go-yaml/ast"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/internal/strictyaml"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/procattr"
)

// agentConfig is everything the agent's flags (and its config file, whose
// keys are the flag names) set. Each part belongs to one component and is
// validated by it before anything starts.
type agentConfig struct {
	nvml        nvmlFlags
	configPath  string
	logFormat   string
	logLevel    string
	procRoot    string
	podLogsRoot string
	// podResourcesSocket is the kubelet's PodResources API: one client on
	// it serves telemetry, the memory watchdog, the MIG service and the
	// sharing runtime.
	podResourcesSocket string
	rediscover         time.Duration

	http      httpOptions
	admin     adminOptions
	dp        devicePluginOptions
	dra       draOptions
	health    healthOptions
	telemetry telemetryOptions
	mig       migOptions
	sharing   sharingOptions
	labels    labelsOptions
	enforce   enforceOptions
	mps       mpsOptions
	driver    driverEditsOptions
}

// agentFlagSet builds the agent's complete flag set. Tests use it to check
// that manifests name real flags.
func agentFlagSet(stderr io.Writer) (*flag.FlagSet, *agentConfig) {
	fs := flag.NewFlagSet("gpud agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &agentConfig{}
	c.nvml.register(fs)
	fs.StringVar(&c.configPath, "config", "", "agent config file (YAML; keys are flag names, flags on the command line win, at start and when the file changes)")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.procRoot, "proc-root", procattr.DefaultProcRoot, "the host's /proc (GPU processes are host PIDs: run with hostPID or mount the host's /proc here)")
	fs.StringVar(&c.podLogsRoot, "pod-logs-root", procattr.DefaultPodLogsRoot, "the kubelet's pod log directory, which maps pod UIDs to namespace/name")
	fs.StringVar(&c.podResourcesSocket, "pod-resources-socket", podresources.DefaultSocket, "kubelet PodResources API socket: pod labels on metrics, and which devices are allocated (MIG and sharing changes never take one away)")
	fs.DurationVar(&c.rediscover, "rediscover-interval", 30*time.Second, "how often to reread the GPU inventory (at least 1s)")
	c.http.register(fs)
	c.admin.register(fs)
	c.dp.register(fs)
	c.dra.register(fs)
	c.health.register(fs)
	c.telemetry.register(fs)
	c.mig.register(fs)
	c.sharing.register(fs)
	c.labels.register(fs)
	c.enforce.register(fs)
	c.mps.register(fs)
	c.driver.register(fs)
	return fs, c
}

// loadAgentConfig is the agent's one config loader, used at start and at
// every reload: it parses args, applies the --config file under them
// (flags on the command line win) and validates the result. Every error
// names the flag, and the file and line when the value came from the file.
func loadAgentConfig(args []string, stderr io.Writer) (*agentConfig, error) {
	fs, c := agentFlagSet(stderr)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("agent: unexpected arguments %q", fs.Args())
	}
	var lines map[string]int
	if c.configPath != "" {
		var err error
		if lines, err = applyConfigFile(fs, c.configPath); err != nil {
			return nil, err
		}
	}
	var errs []error
	for _, err := range c.validate() {
		var fe *flagError
		if errors.As(err, &fe) {
			if line, ok := lines[fe.flag]; ok {
				err = fmt.Errorf("%s:%d: %s: %w", c.configPath, line, fe.flag, fe.err)
			}
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// flagError is a bad flag value: "--name: what is wrong and what is allowed".
type flagError struct {
	flag string
	err  error
}

func (e *flagError) Error() string { return "--" + e.flag + ": " + e.err.Error() }
func (e *flagError) Unwrap() error { return e.err }

func flagErr(name, format string, args ...any) error {
	return &flagError{flag: name, err: fmt.Errorf(format, args...)}
}

// validate checks every part of the config without touching anything
// (no socket, no NVML, no file but the ones named).
func (c *agentConfig) validate() []error {
	var errs []error
	if _, err := newLogger(io.Discard, c.logFormat, c.logLevel); err != nil {
		errs = append(errs, err)
	}
	if c.rediscover < discovery.MinRediscoverInterval {
		errs = append(errs, flagErr("rediscover-interval", "%s: want at least %s", c.rediscover, discovery.MinRediscoverInterval))
	}
	if c.podResourcesSocket == "" {
		errs = append(errs, flagErr("pod-resources-socket", "empty: want the kubelet's socket (%s)", podresources.DefaultSocket))
	}
	errs = append(errs, c.nvml.validate()...)
	errs = append(errs, c.http.validate()...)
	errs = append(errs, c.admin.validate()...)
	errs = append(errs, c.dp.validate()...)
	errs = append(errs, c.dra.validate(c.nvml.nodeName, c.dp.cdiDir)...)
	errs = append(errs, c.health.validate()...)
	errs = append(errs, c.telemetry.validate()...)
	errs = append(errs, c.mig.validate()...)
	errs = append(errs, c.sharing.validate()...)
	errs = append(errs, c.labels.validate(&c.dra, c.nvml.nodeName)...)
	errs = append(errs, c.enforce.validate()...)
	errs = append(errs, c.driver.validate()...)
	return errs
}

// validateAddr checks a host:port flag value; empty is allowed (disabled).
func validateAddr(name, addr string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return flagErr(name, "%q: want host:port (%v)", addr, err)
	}
	return nil
}

// validateSocketPath refuses a path that exists and is not a socket: the
// server removes a stale socket before listening, which must never delete
// a user's file.
func validateSocketPath(name, path string) error {
	if path == "" {
		return nil
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSocket != 0 {
		return nil
	}
	return flagErr(name, "%s exists and is not a socket; refusing to replace it", path)
}

// applyConfigFile sets flags from a YAML file whose keys are flag names
// (`http-addr: 127.0.0.1:9400`). Flags given on the command line win. An
// unknown key or a bad value is an error "FILE:LINE: ...". It returns the
// line of each flag the file set.
func applyConfigFile(fs *flag.FlagSet, path string) (map[string]int, error) {
	data, err := fileio.ReadFile(path, fileio.MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	return applyConfig(fs, path, data)
}

// applyConfig is applyConfigFile on data read from path. The file goes
// through strictyaml.Parse (the guards of every YAML the agent reads: no
// library panic, no mapping wide enough to make the parser quadratic), and
// a panic while walking the library's tree is an error at the key being
// applied.
func applyConfig(fs *flag.FlagSet, path string, data []byte) (lines map[string]int, err error) {
	file, err := strictyaml.Parse(data)
	if err != nil {
		var ye *strictyaml.Error
		if errors.As(err, &ye) && ye.Line > 0 {
			return nil, &fileError{path: path, line: ye.Line, msg: fmt.Sprintf("%s (column %d)", quoteIfBinary(ye.Msg), ye.Column), err: err}
		}
		return nil, &fileError{path: path, msg: quoteIfBinary(err.Error()), err: err}
	}
	at := 1 // the line being applied, for a panic in the library's tree
	defer func() {
		if r := recover(); r != nil {
			lines, err = nil, &fileError{path: path, line: at, err: strictyaml.ErrMalformed,
				msg: quoteIfBinary(fmt.Sprintf("%v (the YAML library failed: %v)", strictyaml.ErrMalformed, r))}
		}
	}()
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	lines = map[string]int{}
	var errs []error
	unknown := false // the first unknown key's error lists the keys
	for _, doc := range file.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		at = max(lineOf(doc.Body), 1)
		mapping, ok := mappingOf(doc.Body)
		if !ok {
			return nil, fmt.Errorf("%s:%d: want a mapping of flag names to values", path, at)
		}
		for _, kv := range mapping.Values {
			at = max(lineOf(kv.Key), at)
			if len(errs) == maxConfigErrors {
				errs = append(errs, fmt.Errorf("%s:%d: too many errors, stopped here", path, at))
				return lines, errors.Join(errs...)
			}
			key := kv.Key.String()
			f := fs.Lookup(key)
			if f == nil || key == "config" {
				err := fmt.Errorf("%s:%d: unknown key %s", path, at, quoteTrunc(key))
				if !unknown {
					err = fmt.Errorf("%w (keys are the agent's flag names: %s)", err, flagNames(fs))
					unknown = true
				}
				errs = append(errs, err)
				continue
			}
			if _, dup := lines[key]; dup {
				errs = append(errs, fmt.Errorf("%s:%d: %s set twice (first on line %d)", path, at, key, lines[key]))
				continue
			}
			lines[key] = at
			if set[key] {
				continue
			}
			v, err := scalar(kv.Value)
			if err == nil {
				err = fs.Set(key, v)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %s: %w", path, at, key, err))
			}
		}
	}
	return lines, errors.Join(errs...)
}

// maxConfigErrors bounds the errors one config file reports: the agent has
// about 30 keys, so a file with more errors is not a config file, and its
// error should not be megabytes long.
const maxConfigErrors = 20

// fileError is an error in a config file: "FILE:LINE: msg", or "FILE: msg"
// when line is 0. msg is printable (quoteIfBinary); err is the cause.
type fileError struct {
	path string
	line int
	msg  string
	err  error
}

func (e *fileError) Error() string {
	if e.line == 0 {
		return fmt.Sprintf("%s: %s", e.path, e.msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.path, e.line, e.msg)
}

func (e *fileError) Unwrap() error { return e.err }

// lineOf is the line of a node's token, or 0.
func lineOf(n ast.Node) int {
	if tk := n.GetToken(); tk != nil && tk.Position != nil {
		return tk.Position.Line
	}
	return 0
}

// mappingOf returns a document body as a mapping; a one-key mapping parses
// as a MappingValueNode.
func mappingOf(n ast.Node) (*ast.MappingNode, bool) {
	switch m := n.(type) {
	case *ast.MappingNode:
		return m, true
	case *ast.MappingValueNode:
		return &ast.MappingNode{Values: []*ast.MappingValueNode{m}}, true
	}
	return nil, false
}

// scalar returns a YAML value as the string a flag parses; sequences of
// scalars become comma-separated lists. Mappings are refused.
func scalar(n ast.Node) (string, error) {
	switch v := n.(type) {
	case nil:
		return "", nil
	case *ast.SequenceNode:
		parts := make([]string, len(v.Values))
		for i, x := range v.Values {
			if _, ok := x.(*ast.SequenceNode); ok {
				return "", errors.New("want a value or a list of values, not nested lists")
			}
			s, err := scalar(x)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case *ast.StringNode:
		return v.Value, nil
	case *ast.NullNode:
		return "", nil
	case *ast.MappingNode, *ast.MappingValueNode:
		return "", errors.New("want a value or a list of values, not a mapping")
	}
	return n.String(), nil
}

func flagNames(fs *flag.FlagSet) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "config" {
			names = append(names, f.Name)
		}
	})
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// maxQuoted bounds user-supplied text echoed in an error message.
const maxQuoted = 200

// quoteIfBinary returns s as it is when it is printable text, and
// otherwise quoted (%q) and cut to maxQuoted bytes, so a binary file never
// lands raw in a terminal or a log.
func quoteIfBinary(s string) string {
	if !utf8.ValidString(s) {
		return quoteTrunc(s)
	}
	for _, r := range s {
		if (r < ' ' && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return quoteTrunc(s)
		}
	}
	return s
}

// printableLines applies quoteIfBinary to each line of an error message,
// so one binary part of a joined error does not hide the others.
func printableLines(msg string) string {
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		lines[i] = quoteIfBinary(l)
	}
	return strings.Join(lines, "\n")
}

// quoteTrunc quotes s (%q), cut to maxQuoted bytes.
func quoteTrunc(s string) string {
	if len(s) > maxQuoted {
		return fmt.Sprintf("%q...", s[:maxQuoted])
	}
	return fmt.Sprintf("%q", s)
}
