// Package computemode puts the GPUs that MPS shares in the
// EXCLUSIVE_PROCESS compute mode through NVML, so that only the GPU's MPS
// server (and through it the daemon's clients) can create a context, and
// puts back the mode each GPU had before once it is no longer shared.
//
// It owns the compute mode and nothing else: which GPUs are shared comes
// from the caller ([Manager.Set]); the MPS daemons are pkg/mps's. It
// imports go-nvml and is wired only from cmd/gpud.
package computemode

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/internal/fileio"
)

// PreviousFile is the file, under <StateDir>/<gpu-uuid>, that keeps the
// mode a shared GPU had before, so an agent restarted after a crash still
// puts it back.
const PreviousFile = "previous-compute-mode"

// Config configures a [Manager].
type Config struct {
	// StateDir keeps each shared GPU's previous mode in
	// <StateDir>/<gpu-uuid>/[PreviousFile]; "" keeps it in memory only
	// (lost if the agent dies while the GPU is shared).
	StateDir string
}

// State is one GPU's state, for status pages and tests.
type State struct {
	// Shared is true while the GPU should be EXCLUSIVE_PROCESS.
	Shared bool
	// Set is true once it was set (and not yet restored).
	Set bool
	// Previous is the mode to restore.
	Previous nvml.ComputeMode
	// Err is the last failure to set or restore, "" when none.
	Err string
}

type gpuState struct {
	set      bool
	previous nvml.ComputeMode
	err      error
}

// Manager sets and restores compute modes. Its methods are safe from any
// goroutine; NVML calls are serialized.
type Manager struct {
	lib nvml.Interface
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	shared []string
	gpus   map[string]*gpuState
}

// New returns a manager on an initialized NVML. GPUs whose previous mode
// a former run left in StateDir are restored at the first [Manager.Set]
// that does not list them.
func New(lib nvml.Interface, cfg Config, log *slog.Logger) *Manager {
	m := &Manager{lib: lib, cfg: cfg, log: log, gpus: map[string]*gpuState{}}
	if cfg.StateDir == "" {
		return m
	}
	files, _ := filepath.Glob(filepath.Join(cfg.StateDir, "*", PreviousFile))
	for _, f := range files {
		uuid := filepath.Base(filepath.Dir(f))
		prev, err := readPrevious(f)
		if err != nil {
			log.Warn("previous compute mode unreadable, left as is", "gpu_uuid", uuid, "err", err)
			continue
		}
		m.gpus[uuid] = &gpuState{set: true, previous: prev}
	}
	return m
}

func nvmlErr(ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return ret
}

// Set makes the listed GPUs EXCLUSIVE_PROCESS and restores the others this
// manager changed. MIG devices (UUIDs MIG-...) are skipped: the compute
// mode belongs to the whole GPU. It returns every failure, each naming its
// GPU; a failed GPU is tried again at the next Set.
func (m *Manager) Set(uuids []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.shared = slices.Clone(uuids)
	var errs []error
	for _, u := range uuids {
		if strings.HasPrefix(u, "MIG-") {
			continue
		}
		st := m.gpus[u]
		if st == nil {
			st = &gpuState{}
			m.gpus[u] = st
		}
		if st.set {
			continue
		}
		st.err = m.setExclusive(u, st)
		errs = append(errs, st.err)
	}
	for u, st := range m.gpus {
		if slices.Contains(uuids, u) {
			continue
		}
		if err := m.restore(u, st); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RestoreAll puts back every mode this manager changed (the agent is
// stopping). It returns every failure, each naming its GPU.
func (m *Manager) RestoreAll() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.shared = nil
	var errs []error
	for u, st := range m.gpus {
		if err := m.restore(u, st); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Status returns each known GPU's state by UUID.
func (m *Manager) Status() map[string]State {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]State, len(m.gpus))
	for u, st := range m.gpus {
		s := State{Shared: slices.Contains(m.shared, u), Set: st.set, Previous: st.previous}
		if st.err != nil {
			s.Err = st.err.Error()
		}
		out[u] = s
	}
	return out
}

func (m *Manager) device(uuid string) (nvml.Device, error) {
	d, ret := m.lib.DeviceGetHandleByUUID(uuid)
	if err := nvmlErr(ret); err != nil {
		return nil, fmt.Errorf("computemode: gpu %s: get handle: %w", uuid, err)
	}
	return d, nil
}

// setExclusive records the GPU's mode and sets EXCLUSIVE_PROCESS.
func (m *Manager) setExclusive(uuid string, st *gpuState) error {
	d, err := m.device(uuid)
	if err != nil {
		return err
	}
	prev, ret := d.GetComputeMode()
	if err := nvmlErr(ret); err != nil {
		return fmt.Errorf("computemode: gpu %s: read compute mode: %w", uuid, err)
	}
	if err := m.savePrevious(uuid, prev); err != nil {
		return err
	}
	if prev != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		if err := nvmlErr(d.SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS)); err != nil {
			m.removePrevious(uuid)
			return fmt.Errorf("computemode: gpu %s: set EXCLUSIVE_PROCESS%s: %w", uuid, hint(err), err)
		}
	}
	st.set, st.previous = true, prev
	m.log.Info("compute mode set", "gpu_uuid", uuid, "mode", "EXCLUSIVE_PROCESS", "previous", modeName(prev))
	return nil
}

// restore puts back the mode a GPU had, when this manager changed it.
func (m *Manager) restore(uuid string, st *gpuState) error {
	if !st.set {
		delete(m.gpus, uuid)
		return nil
	}
	d, err := m.device(uuid)
	if err == nil {
		if err = nvmlErr(d.SetComputeMode(st.previous)); err != nil {
			err = fmt.Errorf("computemode: gpu %s: restore %s%s: %w", uuid, modeName(st.previous), hint(err), err)
		}
	}
	if err != nil {
		st.err = err
		return err
	}
	m.removePrevious(uuid)
	delete(m.gpus, uuid)
	m.log.Info("compute mode restored", "gpu_uuid", uuid, "mode", modeName(st.previous))
	return nil
}

// hint says what to do about the NVML errors a user can fix.
func hint(err error) string {
	switch {
	case errors.Is(err, nvml.ERROR_NO_PERMISSION):
		return " (needs root: run the agent privileged)"
	case errors.Is(err, nvml.ERROR_NOT_SUPPORTED):
		return " (not supported on this GPU: MPS limits hold only for clients of the daemon)"
	}
	return ""
}

func (m *Manager) previousPath(uuid string) string {
	return filepath.Join(m.cfg.StateDir, uuid, PreviousFile)
}

// savePrevious keeps prev unless a former run already kept the mode
// from before it shared the GPU.
func (m *Manager) savePrevious(uuid string, prev nvml.ComputeMode) error {
	if m.cfg.StateDir == "" {
		return nil
	}
	path := m.previousPath(uuid)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("computemode: gpu %s: keep previous mode: %w", uuid, err)
	}
	if err := fileio.WriteFile(path, []byte(strconv.Itoa(int(prev))+"\n"), 0o644); err != nil {
		return fmt.Errorf("computemode: gpu %s: keep previous mode: %w", uuid, err)
	}
	return nil
}

func (m *Manager) removePrevious(uuid string) {
	if m.cfg.StateDir == "" {
		return
	}
	if err := os.Remove(m.previousPath(uuid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		m.log.Warn("previous compute mode file not removed", "gpu_uuid", uuid, "err", err)
	}
}

func readPrevious(path string) (nvml.ComputeMode, error) {
	b, err := fileio.ReadFile(path, 64)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 || n >= int(nvml.COMPUTEMODE_COUNT) {
		return 0, fmt.Errorf("%s: %q is not a compute mode", path, strings.TrimSpace(string(b)))
	}
	return nvml.ComputeMode(n), nil
}

// modeName is nvidia-smi's name of a compute mode.
func modeName(m nvml.ComputeMode) string {
	switch m {
	case nvml.COMPUTEMODE_DEFAULT:
		return "DEFAULT"
	case nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
		return "EXCLUSIVE_THREAD"
	case nvml.COMPUTEMODE_PROHIBITED:
		return "PROHIBITED"
	case nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		return "EXCLUSIVE_PROCESS"
	}
	return "mode " + strconv.Itoa(int(m))
}
