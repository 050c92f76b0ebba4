package mps

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/internal/testkit/testbuf"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/mps/mpstest"
)

// driverRoot builds the stand-in control program (testdata/fakemps) into
// a temp driver root, once per test binary.
var (
	buildOnce sync.Once
	builtRoot string
	buildErr  error
)

func driverRoot(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpud-mps-driver")
		if err != nil {
			buildErr = err
			return
		}
		builtRoot = dir
		buildErr = mpstest.Build(filepath.Join(dir, ControlBinary))
	})
	if buildErr != nil {
		t.Fatalf("build the stand-in nvidia-cuda-mps-control: %v", buildErr)
	}
	return builtRoot
}

// syncBuffer is a log sink safe across goroutines.
type syncBuffer = testbuf.Buffer

func newSupervisor(t *testing.T) (*Supervisor, *syncBuffer) {
	t.Helper()
	root, err := os.MkdirTemp("", "mps") // short: the daemon's socket lives here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Kill any daemon a failed test left behind, then remove.
		pids, _ := filepath.Glob(filepath.Join(root, "*", "pipe", "control.pid"))
		for _, p := range pids {
			if b, err := os.ReadFile(p); err == nil {
				if pid, err := strconv.Atoi(string(b)); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		_ = os.RemoveAll(root)
	})
	var logs syncBuffer
	s, err := New(Config{DriverRoot: driverRoot(t), Root: root, CheckInterval: 50 * time.Millisecond,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return s, &logs
}

func daemonPID(t *testing.T, s *Supervisor, uuid string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.PipeDir(uuid), "control.pid"))
	if err != nil {
		t.Fatalf("daemon of %s: %v", uuid, err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestSupervisorLifecycle(t *testing.T) {
	s, logs := newSupervisor(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	const a, b = "GPU-aaaa", "GPU-bbbb"
	s.SetShared([]string{a, b})
	testwait.ForErr(t, 10*time.Second, "both daemons running", func() error {
		st := s.Status()
		if !st[a].Running || !st[b].Running {
			return errors.New("not yet")
		}
		return nil
	})
	// The daemon answers through its pipe directory: a container that
	// mounts it reaches its GPU's daemon.
	if out, err := s.Command(t.Context(), a, "set_default_active_thread_percentage 25", "get_default_active_thread_percentage"); err != nil || out != "25\n25" {
		t.Fatalf("commands = %q, %v; want 25 twice", out, err)
	}

	// The daemon dies: it is restarted, and the outage is logged once.
	pidA := daemonPID(t, s, a)
	if err := syscall.Kill(pidA, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(s.PipeDir(a), "control")) // a killed daemon leaves its socket; the real one does too
	testwait.ForErr(t, 10*time.Second, "the dead daemon restarted", func() error {
		if st := s.Status()[a]; !st.Running || st.Restarts != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	if n := strings.Count(logs.String(), "mps daemon died"); n != 1 {
		t.Errorf("outage logged %d times, want once:\n%s", n, logs.String())
	}
	if newPID := daemonPID(t, s, a); newPID == pidA || !alive(newPID) {
		t.Errorf("restarted daemon pid %d (was %d), want a new live one", newPID, pidA)
	}

	// A is no longer shared: its daemon quits.
	s.SetShared([]string{b})
	testwait.ForErr(t, 10*time.Second, "a's daemon stopped", func() error {
		if _, held := s.Status()[a]; held {
			return errors.New("still supervised")
		}
		if _, err := os.Stat(filepath.Join(s.PipeDir(a), "control")); err == nil {
			return errors.New("still listening")
		}
		return nil
	})

	// The agent stops: every daemon quits (its socket goes; a quit
	// daemon's pid may linger as a zombie where nobody reaps orphans).
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil
	for _, u := range []string{a, b} {
		if _, err := os.Stat(filepath.Join(s.PipeDir(u), "control")); err == nil {
			t.Errorf("daemon of %s still listening after Run ended (quit answers after it closed)", u)
		}
	}
}

func TestStartFailureBacksOff(t *testing.T) {
	s, logs := newSupervisor(t)
	s.control = filepath.Join(t.TempDir(), "missing") // the driver went away
	const u = "GPU-cccc"
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	s.SetShared([]string{u})
	time.Sleep(500 * time.Millisecond)
	st := s.Status()[u]
	cancel()
	<-done
	if st.Running || st.LastErr == "" {
		t.Errorf("state = %+v, want not running with an error", st)
	}
	if n := strings.Count(logs.String(), "mps daemon start failed"); n != 1 {
		t.Errorf("start failures logged %d times, want once per outage", n)
	}
}

func TestNewWithoutControl(t *testing.T) {
	if _, err := New(Config{DriverRoot: t.TempDir()}, slog.Default()); !errors.Is(err, ErrNoControl) {
		t.Fatalf("New = %v, want ErrNoControl", err)
	}
}

// TestStandInProtocol drives the stand-in control program through the
// supervisor's Command with the commands the agent and make test-gpu use,
// one a line on the client's stdin as with the driver's program.
func TestStandInProtocol(t *testing.T) {
	s, _ := newSupervisor(t)
	const u = "GPU-dddd"
	if err := s.start(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	if err := s.start(t.Context(), u); err == nil {
		t.Error("a second -d for the same pipe directory succeeded; the driver's refuses")
	}
	out, err := s.Command(t.Context(), u, "set_default_device_pinned_mem_limit 0 2G", "get_default_device_pinned_mem_limit 0",
		"set_default_active_thread_percentage 40", "get_default_active_thread_percentage", "get_server_list", "no_such_command")
	if err != nil {
		t.Fatal(err)
	}
	if want := "2G\n40\n40\n\nInvalid command"; out != want {
		t.Errorf("answers %q, want %q", out, want)
	}
	if _, err := s.Command(t.Context(), u, "quit"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Command(t.Context(), u, "get_server_list"); err == nil {
		t.Error("the daemon answers after quit")
	}
	log, err := os.ReadFile(filepath.Join(s.LogDir(u), "control.log"))
	if err != nil || !strings.Contains(string(log), "cmd set_default_device_pinned_mem_limit 0 2G") {
		t.Errorf("control.log = %q, %v; want the commands logged", log, err)
	}
}
