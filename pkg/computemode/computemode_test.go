package computemode

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/simnode"
)

func mode(t *testing.T, n *simnode.Node, i int) nvml.ComputeMode {
	t.Helper()
	d, _ := n.DeviceGetHandleByIndex(i)
	m, ret := d.GetComputeMode()
	if ret != nvml.SUCCESS {
		t.Fatalf("GetComputeMode(%d) = %v", i, ret)
	}
	return m
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestSetAndRestore(t *testing.T) {
	n := simnode.NewBuiltin("dgx-h100")
	uuid := func(i int) string { return n.Device(i).UUID() }
	// GPU 1 was PROHIBITED before gpud shared it: that is what comes back.
	d1, _ := n.DeviceGetHandleByIndex(1)
	if ret := d1.SetComputeMode(nvml.COMPUTEMODE_PROHIBITED); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	m := New(n, Config{StateDir: t.TempDir()}, quiet())
	if err := m.Set([]string{uuid(0), uuid(1), "MIG-aaaa"}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		want := nvml.COMPUTEMODE_EXCLUSIVE_PROCESS
		if i == 2 {
			want = nvml.COMPUTEMODE_DEFAULT
		}
		if got := mode(t, n, i); got != want {
			t.Errorf("gpu %d mode = %v, want %v", i, got, want)
		}
	}
	if st := m.Status()[uuid(1)]; !st.Shared || !st.Set || st.Previous != nvml.COMPUTEMODE_PROHIBITED {
		t.Errorf("status of gpu 1 = %+v, want shared, set, previous PROHIBITED", st)
	}
	// GPU 0 is no longer shared: back to DEFAULT; GPU 1 stays.
	if err := m.Set([]string{uuid(1)}); err != nil {
		t.Fatal(err)
	}
	if got := mode(t, n, 0); got != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("gpu 0 after unsharing = %v, want DEFAULT", got)
	}
	if got := mode(t, n, 1); got != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("gpu 1 still shared = %v, want EXCLUSIVE_PROCESS", got)
	}
	if err := m.RestoreAll(); err != nil {
		t.Fatal(err)
	}
	if got := mode(t, n, 1); got != nvml.COMPUTEMODE_PROHIBITED {
		t.Errorf("gpu 1 after RestoreAll = %v, want PROHIBITED", got)
	}
	if len(m.Status()) != 0 {
		t.Errorf("status after RestoreAll = %v, want empty", m.Status())
	}
}

// TestSetFailsClearly: a GPU that refuses is reported naming it and what
// to do, the others are set, and the next Set tries it again.
func TestSetFailsClearly(t *testing.T) {
	n := simnode.NewBuiltin("dgx-h100")
	a, b := n.Device(0).UUID(), n.Device(1).UUID()
	gpu0 := 0
	n.InjectFault("SetComputeMode", simnode.FaultSpec{GPU: &gpu0, Return: nvml.ERROR_NO_PERMISSION})
	m := New(n, Config{}, quiet())
	err := m.Set([]string{a, b})
	if !errors.Is(err, nvml.ERROR_NO_PERMISSION) || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), "needs root") {
		t.Fatalf("Set with a refusing GPU = %v, want ERROR_NO_PERMISSION naming %s and the fix", err, a)
	}
	if st := m.Status()[a]; st.Set || st.Err == "" {
		t.Errorf("status of the refusing GPU = %+v, want not set with its error", st)
	}
	if got := mode(t, n, 1); got != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("the other GPU = %v, want EXCLUSIVE_PROCESS", got)
	}
	if err := m.Set([]string{a, b}); err != nil { // the fault fired once
		t.Fatalf("retry: %v", err)
	}
	if got := mode(t, n, 0); got != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("gpu 0 after the retry = %v, want EXCLUSIVE_PROCESS", got)
	}
	if err := m.Set([]string{"GPU-nope"}); err == nil || !strings.Contains(err.Error(), "GPU-nope") {
		t.Errorf("Set of an unknown GPU = %v, want an error naming it", err)
	}
}

// TestRestartRestoresPrevious: an agent that died with a GPU shared left
// its previous mode in the state dir; the next agent restores that mode,
// not the EXCLUSIVE_PROCESS it finds.
func TestRestartRestoresPrevious(t *testing.T) {
	n := simnode.NewBuiltin("dgx-h100")
	u := n.Device(3).UUID()
	dir := t.TempDir()
	if err := New(n, Config{StateDir: dir}, quiet()).Set([]string{u}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, u, PreviousFile)); err != nil {
		t.Fatalf("previous mode not kept: %v", err)
	}
	// The agent died; a new one starts with the GPU still shared, then it
	// is unshared.
	m := New(n, Config{StateDir: dir}, quiet())
	if err := m.Set([]string{u}); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(nil); err != nil {
		t.Fatal(err)
	}
	if got := mode(t, n, 3); got != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("after restart and unsharing = %v, want DEFAULT", got)
	}
	if _, err := os.Stat(filepath.Join(dir, u, PreviousFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("previous mode file after restoring: %v, want removed", err)
	}
	// A former run's file with garbage is left alone and does not crash.
	bad := filepath.Join(dir, "GPU-bad", PreviousFile)
	if err := os.MkdirAll(filepath.Dir(bad), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("nine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st := New(n, Config{StateDir: dir}, quiet()).Status(); len(st) != 0 {
		t.Errorf("status with an unreadable file = %v, want nothing held", st)
	}
}
