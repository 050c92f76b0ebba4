// Package mps runs and supervises one MPS control daemon
// (nvidia-cuda-mps-control -d, from the host driver root) per shared GPU,
// with its pipe and log directories under <root>/<gpu-uuid>: it starts the
// daemons of the GPUs that are shared, checks each through the control
// client, restarts one that died (with backoff, logged once per outage)
// and stops the daemons of GPUs that are no longer shared.
//
// It owns the daemons' processes and directories and nothing else: which
// GPUs are shared comes from the caller ([Supervisor.SetShared]); the
// containers' limits (CUDA_MPS_* and the pipe directory) are the device
// plugin's and the DRA driver's to set, through [PipeDir] and
// [ContainerPipeDir]. It does not touch NVML: the compute mode is
// pkg/computemode's.
package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultRoot holds each GPU's pipe and log directories.
const DefaultRoot = "/run/gpud/mps"

// ContainerPipeDir is where a container sharing a GPU sees that GPU's pipe
// directory, and what its CUDA_MPS_PIPE_DIRECTORY says: CUDA's own default,
// so a program that drops the variable still finds the daemon.
const ContainerPipeDir = "/tmp/nvidia-mps"

// EnvPipeDirectory is the variable that points a CUDA client at its
// daemon's pipe directory.
const EnvPipeDirectory = "CUDA_MPS_PIPE_DIRECTORY"

// PipeDir is the host's pipe directory of a GPU's daemon under root (the
// agent's --mps-root): the directory containers sharing the GPU mount at
// [ContainerPipeDir].
func PipeDir(root, uuid string) string { return filepath.Join(root, uuid, "pipe") }

// ShmDir is the directory under root (the agent's --mps-root) that the
// daemons and their clients share as /dev/shm: MPS servers and clients
// exchange shared memory there besides the pipe directory's sockets, so a
// client in another container must see the daemon's /dev/shm. The agent's
// DaemonSet mounts it at the agent's /dev/shm (where the daemons it starts
// create their segments); containers sharing a GPU mount it at
// [ContainerShmDir]. One per node, like the agent's /dev/shm.
func ShmDir(root string) string { return filepath.Join(root, "shm") }

// ContainerShmDir is where a container sharing a GPU mounts [ShmDir].
const ContainerShmDir = "/dev/shm"

// ControlBinary is the driver's MPS control program, relative to the
// driver root.
const ControlBinary = "usr/bin/nvidia-cuda-mps-control"

// ErrNoControl is returned (wrapped) by [New] when the driver root has no
// MPS control program.
var ErrNoControl = errors.New("mps: no nvidia-cuda-mps-control")

// Config configures the supervisor. Zero values are the defaults noted.
type Config struct {
	// DriverRoot is the host driver's root ("" means "/"); the control
	// program is <DriverRoot>/usr/bin/nvidia-cuda-mps-control.
	DriverRoot string
	// Root holds <Root>/<gpu-uuid>/pipe and /log ("" means [DefaultRoot]).
	Root string
	// CheckInterval is how often each daemon is checked (0 means 5s).
	CheckInterval time.Duration
	// MinBackoff and MaxBackoff bound the wait before restarting a daemon
	// that died or failed to start (0 means 1s and 1m).
	MinBackoff, MaxBackoff time.Duration
	// CommandTimeout bounds each control command (0 means 5s).
	CommandTimeout time.Duration
}

// State is one daemon's state, for status pages and tests.
type State struct {
	Running  bool
	Restarts int    // starts after the first
	LastErr  string // why it last failed; "" when it never did
}

type daemon struct {
	running bool
	started bool // started at least once
	down    bool // in an outage that was logged
	backoff time.Duration
	nextTry time.Time
	State
}

// Supervisor keeps one daemon per shared GPU. Create it with [New], run it
// once with [Supervisor.Run]; SetShared and Status are safe from any
// goroutine.
type Supervisor struct {
	cfg     Config
	control string
	log     *slog.Logger
	changed chan struct{}

	mu      sync.Mutex
	shared  []string
	daemons map[string]*daemon
}

// New checks that the control program exists.
func New(cfg Config, log *slog.Logger) (*Supervisor, error) {
	if cfg.DriverRoot == "" {
		cfg.DriverRoot = "/"
	}
	if cfg.Root == "" {
		cfg.Root = DefaultRoot
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = 5 * time.Second
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = time.Second
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = time.Minute
	}
	if cfg.CommandTimeout == 0 {
		cfg.CommandTimeout = 5 * time.Second
	}
	control := filepath.Join(cfg.DriverRoot, ControlBinary)
	fi, err := os.Stat(control)
	if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("%w at %s (%v): point --driver-root at the host driver's root", ErrNoControl, control, err)
	}
	return &Supervisor{cfg: cfg, control: control, log: log, changed: make(chan struct{}, 1), daemons: map[string]*daemon{}}, nil
}

// SetShared sets the GPUs (UUIDs) that need a daemon.
func (s *Supervisor) SetShared(uuids []string) {
	u := slices.Clone(uuids)
	slices.Sort(u)
	u = slices.Compact(u)
	s.mu.Lock()
	s.shared = u
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// PipeDir is the GPU's CUDA_MPS_PIPE_DIRECTORY, which containers sharing
// it must mount and point at.
func (s *Supervisor) PipeDir(uuid string) string { return PipeDir(s.cfg.Root, uuid) }

// Root is the directory holding every GPU's pipe and log directories.
func (s *Supervisor) Root() string { return s.cfg.Root }

// LogDir is the GPU's CUDA_MPS_LOG_DIRECTORY.
func (s *Supervisor) LogDir(uuid string) string { return filepath.Join(s.cfg.Root, uuid, "log") }

// Status returns each supervised daemon's state by GPU UUID.
func (s *Supervisor) Status() map[string]State {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]State, len(s.daemons))
	for u, d := range s.daemons {
		st := d.State
		st.Running = d.running
		out[u] = st
	}
	return out
}

// Run supervises until ctx ends, then stops every daemon it runs.
func (s *Supervisor) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.CheckInterval)
	defer t.Stop()
	for {
		s.reconcile(ctx)
		// Wake up for a pending restart before the next check.
		wait := s.cfg.CheckInterval
		if next := s.nextRestart(); !next.IsZero() {
			wait = min(wait, max(time.Until(next), 10*time.Millisecond))
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			s.stopAll(context.WithoutCancel(ctx))
			return nil
		case <-s.changed:
		case <-t.C:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func (s *Supervisor) nextRestart() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	for _, d := range s.daemons {
		if !d.running && (next.IsZero() || d.nextTry.Before(next)) {
			next = d.nextTry
		}
	}
	return next
}

func (s *Supervisor) reconcile(ctx context.Context) {
	s.mu.Lock()
	shared := slices.Clone(s.shared)
	s.mu.Unlock()
	for _, u := range shared {
		s.mu.Lock()
		d := s.daemons[u]
		if d == nil {
			d = &daemon{backoff: s.cfg.MinBackoff}
			s.daemons[u] = d
		}
		s.mu.Unlock()
		s.keep(ctx, u, d)
	}
	s.mu.Lock()
	var gone []string
	for u := range s.daemons {
		if !slices.Contains(shared, u) {
			gone = append(gone, u)
		}
	}
	s.mu.Unlock()
	for _, u := range gone {
		s.stop(ctx, u)
	}
}

// keep checks a running daemon and (re)starts a dead one when its backoff
// has passed.
func (s *Supervisor) keep(ctx context.Context, uuid string, d *daemon) {
	if d.running {
		_, err := s.Command(ctx, uuid, "get_default_active_thread_percentage")
		if err == nil {
			return
		}
		s.mu.Lock()
		d.running, d.LastErr, d.nextTry = false, err.Error(), time.Now().Add(d.backoff)
		s.mu.Unlock()
		if !d.down {
			d.down = true
			s.log.Warn("mps daemon died, restarting", "gpu_uuid", uuid, "err", err, "backoff", d.backoff)
		}
		return
	}
	if time.Now().Before(d.nextTry) {
		return
	}
	err := s.start(ctx, uuid)
	if err == nil {
		_, err = s.Command(ctx, uuid, "get_default_active_thread_percentage")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		d.LastErr = err.Error()
		d.nextTry = time.Now().Add(d.backoff)
		if !d.down {
			d.down = true
			s.log.Warn("mps daemon start failed, retrying", "gpu_uuid", uuid, "err", err, "backoff", d.backoff)
		}
		d.backoff = min(2*d.backoff, s.cfg.MaxBackoff)
		return
	}
	if d.started {
		d.Restarts++
	}
	if d.down {
		s.log.Info("mps daemon restored", "gpu_uuid", uuid, "restarts", d.Restarts)
	} else {
		s.log.Info("mps daemon started", "gpu_uuid", uuid, "pipe_dir", s.PipeDir(uuid))
	}
	d.running, d.started, d.down, d.backoff = true, true, false, s.cfg.MinBackoff
}

func (s *Supervisor) env(uuid string) []string {
	return append(os.Environ(), "CUDA_VISIBLE_DEVICES="+uuid,
		"CUDA_MPS_PIPE_DIRECTORY="+s.PipeDir(uuid), "CUDA_MPS_LOG_DIRECTORY="+s.LogDir(uuid))
}

// start runs `nvidia-cuda-mps-control -d`, which returns once the daemon
// forked.
func (s *Supervisor) start(ctx context.Context, uuid string) error {
	for _, dir := range []string{s.PipeDir(uuid), s.LogDir(uuid)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("mps: gpu %s: create %s: %w", uuid, dir, err)
		}
	}
	// Not cut short by the agent stopping: a half-started daemon could not
	// be told to quit. CommandTimeout still bounds it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.control, "-d")
	cmd.Env = s.env(uuid)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mps: gpu %s: %s -d: %w: %s", uuid, s.control, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Command sends control commands (one a line, as on the client's stdin) to
// the GPU's daemon and returns its answers.
func (s *Supervisor) Command(ctx context.Context, uuid string, cmds ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.control)
	cmd.Env = s.env(uuid)
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("mps: gpu %s: %q: %w: %s", uuid, strings.Join(cmds, "; "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// stop quits the GPU's daemon and forgets it.
func (s *Supervisor) stop(ctx context.Context, uuid string) {
	s.mu.Lock()
	d := s.daemons[uuid]
	delete(s.daemons, uuid)
	s.mu.Unlock()
	if d == nil {
		return
	}
	// Quit even a daemon not known to run: a start cut short by the
	// agent stopping may have left one behind.
	if _, err := s.Command(ctx, uuid, "quit"); err != nil {
		if d.running {
			s.log.Warn("mps daemon quit failed", "gpu_uuid", uuid, "err", err)
		}
		return
	}
	s.log.Info("mps daemon stopped", "gpu_uuid", uuid)
}

func (s *Supervisor) stopAll(ctx context.Context) {
	s.mu.Lock()
	var all []string
	for u := range s.daemons {
		all = append(all, u)
	}
	s.mu.Unlock()
	for _, u := range all {
		s.stop(ctx, u)
	}
}
