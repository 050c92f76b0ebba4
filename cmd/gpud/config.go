package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/gpud/gpud/internal/flagfile"
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
	nodeTaint nodeTaintOptions
	events    eventsOptions
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
	c.nodeTaint.register(fs)
	c.events.register(fs)
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
		if lines, err = flagfile.ApplyFile(fs, c.configPath); err != nil {
			return nil, err
		}
	}
	var errs []error
	for _, err := range c.validate() {
		var fe *flagfile.FlagError
		if errors.As(err, &fe) {
			if line, ok := lines[fe.Flag]; ok {
				err = fmt.Errorf("%s:%d: %s: %w", c.configPath, line, fe.Flag, fe.Err)
			}
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// flagErr is a bad value of --name, which loadAgentConfig points at the
// config file's line when the file set it.
func flagErr(name, format string, args ...any) error {
	return &flagfile.FlagError{Flag: name, Err: fmt.Errorf(format, args...)}
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
	errs = append(errs, c.nodeTaint.validate(&c.dra)...)
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
