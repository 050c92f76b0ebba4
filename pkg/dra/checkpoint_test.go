package dra

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/dra/prepared"
)

// TestPreparerRefusesCorruptCheckpoint: a checkpoint that cannot be
// trusted stops the preparer with an error naming the file and what to
// do, and the file is left as it was (nothing recorded in it is lost).
func TestPreparerRefusesCorruptCheckpoint(t *testing.T) {
	cp := prepared.NewCheckpoint()
	cp.Claims["uid-a"] = PreparedClaim{Namespace: "ns", Name: "a", State: prepared.StatePrepared, Devices: []PreparedDevice{{
		Requests: []string{"gpu"}, Device: DeviceRef{Name: "gpu-1-mig-1g10gb-6", Type: TypeMIG, GPUUUID: "GPU-1", MIGUUID: "MIG-1"}}}}
	good, err := prepared.Encode(cp)
	if err != nil {
		t.Fatal(err)
	}
	// Every way a checkpoint is refused is pkg/dra/prepared's to test;
	// here, that the preparer stops on one and keeps the file.
	tests := []struct{ name, data, want string }{
		{name: "garbage", data: "{not json", want: "not JSON"},
		{name: "bad checksum", data: strings.Replace(string(good), `"MIG-1"`, `"MIG-2"`, 1), want: "checksum"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(prepared.Path(dir), []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := NewPreparer(PreparerConfig{NodeName: "n", StateDir: dir, CDIDir: dir, Devices: func() map[string]DeviceRef { return nil }})
			if !errors.Is(err, ErrCorruptCheckpoint) || !strings.Contains(err.Error(), prepared.Path(dir)) ||
				!strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "move it aside") {
				t.Fatalf("NewPreparer = %v, want ErrCorruptCheckpoint naming %s, %q and what to do", err, prepared.Path(dir), tc.want)
			}
			if data, _ := os.ReadFile(prepared.Path(dir)); string(data) != tc.data {
				t.Fatal("the refused checkpoint was changed")
			}
		})
	}
}

// TestPreparerRemovesStaleCDITemp: the temp file of a CDI spec write a
// crash cut short is removed when the preparer starts; the specs and
// other tools' files stay.
func TestPreparerRemovesStaleCDITemp(t *testing.T) {
	dir := t.TempDir()
	// A CDI spec's temp file, beside a spec and another tool's temp file.
	cdiDir := t.TempDir()
	for _, name := range []string{".gpud-dra-uid-a.json.tmp", "gpud-dra-uid-a.json", ".nvidia.json.tmp"} {
		if err := os.WriteFile(filepath.Join(cdiDir, name), []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewPreparer(PreparerConfig{NodeName: "n", StateDir: dir, CDIDir: cdiDir, Devices: func() map[string]DeviceRef { return nil }}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{".gpud-dra-uid-a.json.tmp": false, "gpud-dra-uid-a.json": true, ".nvidia.json.tmp": true} {
		if _, err := os.Stat(filepath.Join(cdiDir, name)); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", name, err == nil, want)
		}
	}
}
