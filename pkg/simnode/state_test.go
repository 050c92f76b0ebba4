package simnode

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/internal/fileio"
)

func TestStateFileUnwritableFailsAtNew(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(notDir, "state.json") // its parent is a regular file
	_, err := New(builtins["dgx-h100"], WithStateFile(path))
	if !errors.Is(err, ErrStateFile) || !strings.Contains(err.Error(), notDir) {
		t.Fatalf("New with a state file under a regular file = %v, want ErrStateFile naming it", err)
	}
	if n := strings.Count(err.Error(), "simnode:"); n != 1 {
		t.Fatalf("error %q names its package %d times, want once", err, n)
	}
}

// A fresh checkout has no .run/: `make run` must not need one made by hand.
func TestStateFileDirIsCreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fresh", ".run")
	path := filepath.Join(dir, "state.json")
	if _, err := New(builtins["dgx-h100"], WithStateFile(path)); err != nil {
		t.Fatalf("New with a state file in a missing directory: %v", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Fatalf("created %s with mode %o, want 0700", dir, perm)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("state file not written: %v", err)
	}
}

func TestStateErrReportsALostSave(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "state.json")
	n, err := New(builtins["dgx-h100"], WithStateFile(path))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.StateErr(); err != nil {
		t.Fatalf("StateErr after a good start = %v", err)
	}
	if err := os.RemoveAll(dir); err != nil { // the disk goes away
		t.Fatal(err)
	}
	d, _ := n.DeviceGetHandleByIndex(0)
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode = %v: the simulated GPU changes even when its state is not saved", ret)
	}
	if err := n.StateErr(); !errors.Is(err, ErrStateFile) {
		t.Fatalf("StateErr after a failed save = %v, want ErrStateFile", err)
	}
	if err := n.ResetGPU(0); !errors.Is(err, ErrStateFile) {
		t.Fatalf("ResetGPU with a failed save = %v, want ErrStateFile", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS || n.StateErr() != nil {
		t.Fatalf("after the directory is back: SetMigMode %v, StateErr %v; want both clear", ret, n.StateErr())
	}
}

func TestStateFileLeavesNoTempFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	// Temp files older versions left when killed mid-write.
	for _, stale := range []string{".simnode-state-123", ".simnode-state-456"} {
		if err := os.WriteFile(filepath.Join(dir, stale), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The fixed temp name a killed fileio.WriteFile leaves is reused.
	if err := os.WriteFile(fileio.TempName(path), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := New(builtins["dgx-h100"], WithStateFile(path))
	if err != nil {
		t.Fatal(err)
	}
	enableMIG(t, n, 0)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "state.json" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("directory holds %v, want only state.json", names)
	}
}

func TestStateFileTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(fileio.MaxStateBytes + 1); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if _, err := New(builtins["dgx-h100"], WithStateFile(path)); !errors.Is(err, fileio.ErrTooLarge) {
		t.Fatalf("New with a huge state file = %v, want ErrTooLarge", err)
	}
}

func TestCloseReleasesStalledFaults(t *testing.T) {
	n := NewBuiltin("dgx-h100")
	hit := make(chan struct{}, 1)
	n.InjectFault("GetPowerUsage", FaultSpec{Times: -1, Delay: 1 << 62, Hit: hit})
	d, _ := n.DeviceGetHandleByIndex(0)
	got := make(chan nvml.Return)
	go func() {
		_, ret := d.GetPowerUsage()
		got <- ret
	}()
	<-hit
	n.Close()
	if ret := <-got; ret != nvml.ERROR_UNINITIALIZED {
		t.Fatalf("stalled call after Close = %v, want ERROR_UNINITIALIZED", ret)
	}
	if _, ret := d.GetPowerUsage(); ret != nvml.ERROR_UNINITIALIZED {
		t.Fatalf("stalling call after Close = %v, want ERROR_UNINITIALIZED at once", ret)
	}
	n.Close() // idempotent
}
