package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/internal/fileio"
)

// CheckpointName is the file in the plugin directory that records prepared
// claims.
const CheckpointName = "checkpoint.json"

const checkpointVersion = 1

// Claim states in the checkpoint.
const (
	// statePreparing: prepare started (MIG devices may be half-created);
	// a retry resumes it and unprepare cleans it up.
	statePreparing = "Preparing"
	statePrepared  = "Prepared"
)

// PreparedDevice is one allocated device of a prepared claim.
type PreparedDevice struct {
	// Requests are the claim's requests the device serves.
	Requests []string `json:"requests"`
	// Device is the device as published; for a MIG device prepare created,
	// MIGUUID is filled in.
	Device DeviceRef `json:"device"`
	// Created is true for a MIG device this claim's prepare creates (or
	// created): unprepare destroys it.
	Created bool `json:"created,omitempty"`
	// Creating is set while [MIGManager.Create] runs for it: after a crash
	// there, the device may exist without its UUID recorded.
	Creating bool `json:"creating,omitempty"`
	// ShareID identifies one allocation of a multi-allocatable GPU.
	ShareID string `json:"shareID,omitempty"`
	// MemoryBytes and CoresPercent are the consumed capacity of a whole
	// GPU: all the memory for an exclusive GPU, less for a fraction;
	// cores 0 means no compute limit.
	MemoryBytes  uint64 `json:"memoryBytes,omitempty"`
	CoresPercent int    `json:"coresPercent,omitempty"`
	// CDIDeviceIDs are what the container runtime gets.
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
}

// Fraction reports whether the device is part of a whole GPU.
func (d PreparedDevice) Fraction() bool {
	return d.Device.Type == TypeGPU && (d.MemoryBytes < d.Device.MemoryBytes || (d.CoresPercent > 0 && d.CoresPercent < 100))
}

// PreparedClaim is one claim in the checkpoint.
type PreparedClaim struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	State     string           `json:"state"`
	Devices   []PreparedDevice `json:"devices"`
}

type checkpoint struct {
	Version int                         `json:"version"`
	Claims  map[types.UID]PreparedClaim `json:"claims"`
}

func checkpointPath(dir string) string { return filepath.Join(dir, CheckpointName) }

// readCheckpoint reads the checkpoint (capped at fileio.MaxStateBytes); a
// missing file is an empty checkpoint.
func readCheckpoint(dir string) (checkpoint, error) {
	cp := checkpoint{Version: checkpointVersion, Claims: map[types.UID]PreparedClaim{}}
	data, err := fileio.ReadFile(checkpointPath(dir), fileio.MaxStateBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return cp, nil
	}
	if err != nil {
		return cp, fmt.Errorf("dra: read checkpoint: %w", err)
	}
	if err := json.Unmarshal(data, &cp); err != nil {
		return cp, fmt.Errorf("dra: checkpoint %s: %w", checkpointPath(dir), err)
	}
	if cp.Version != checkpointVersion {
		return cp, fmt.Errorf("dra: checkpoint %s: version %d, want %d", checkpointPath(dir), cp.Version, checkpointVersion)
	}
	if cp.Claims == nil {
		cp.Claims = map[types.UID]PreparedClaim{}
	}
	return cp, nil
}

// writeCheckpoint replaces the checkpoint atomically and durably.
func writeCheckpoint(dir string, cp checkpoint) error {
	data, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("dra: encode checkpoint: %w", err)
	}
	if len(data) > fileio.MaxStateBytes {
		return fmt.Errorf("dra: checkpoint of %d claims is larger than %d bytes", len(cp.Claims), fileio.MaxStateBytes)
	}
	if err := fileio.WriteFile(checkpointPath(dir), data, 0o600); err != nil {
		return fmt.Errorf("dra: write checkpoint: %w", err)
	}
	return nil
}
