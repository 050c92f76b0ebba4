package prepared

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/internal/fileio"
)

// FileName is the checkpoint's file in the driver's state directory.
const FileName = "checkpoint.json"

// Checkpoint is the prepared claims in memory: the latest version's
// content, whatever version the file had.
type Checkpoint struct {
	Claims map[types.UID]Claim
	// MIGModeOwners maps a GPU UUID to the claim whose prepare turned the
	// GPU's MIG mode on (dynamic MIG): when gpud's last slice on that GPU
	// goes, MIG mode goes off again so the GPU is offered whole. Kept in
	// the checkpoint so a restarted agent still restores the GPU.
	MIGModeOwners map[string]types.UID
}

// NewCheckpoint is an empty checkpoint.
func NewCheckpoint() Checkpoint {
	return Checkpoint{Claims: map[types.UID]Claim{}, MIGModeOwners: map[string]types.UID{}}
}

// The checkpoint file's versions. Each version's file type stays as it
// was written, so a newer gpud reads every older file (converting it in
// [Decode]) and never strands the claims an older one prepared.
const (
	// checkpointV1 (gpud before issue 24): {"version":1,"claims":{...}},
	// no checksum, no MIG mode owners.
	checkpointV1 = 1
	// checkpointV2 adds the checksum and MIGModeOwners.
	checkpointV2 = 2
	// checkpointV3 adds a device's memoryLimitBytes (issue 23), which a
	// gpud reading version 2 refuses as an unknown field: the new version
	// makes that gpud say a newer one wrote the file instead.
	checkpointV3 = 3
	// checkpointVersion is what this gpud writes.
	checkpointVersion = checkpointV3
)

// checkpointFileV1 is version 1 on disk. Claims are pointers so a null
// entry is seen (and refused) rather than read as an empty claim.
type checkpointFileV1 struct {
	Version int                  `json:"version"`
	Claims  map[types.UID]*Claim `json:"claims"`
}

// checkpointFileV2 is version 2 and 3 on disk: version 3 has the same
// shape, its devices may carry memoryLimitBytes. Checksum is the CRC-32C
// (Castagnoli) of the file's JSON encoding with Checksum zero, as the
// kubelet's and NVIDIA's DRA driver's checkpoints carry one: a file
// damaged on disk or edited by hand is refused rather than half-trusted.
type checkpointFileV2 struct {
	Version       int                  `json:"version"`
	Checksum      uint32               `json:"checksum"`
	Claims        map[types.UID]*Claim `json:"claims"`
	MIGModeOwners map[string]types.UID `json:"migModeOwners,omitempty"`
}

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// sum is the file's checksum: over its encoding with Checksum zero.
func (f checkpointFileV2) sum() (uint32, error) {
	f.Checksum = 0
	data, err := json.Marshal(f)
	if err != nil {
		return 0, err
	}
	return crc32.Checksum(data, crc32c), nil
}

// ErrCorrupt is wrapped when the checkpoint cannot be trusted:
// not JSON, a bad checksum, an unknown version, a null or invalid entry.
var ErrCorrupt = errors.New("dra: checkpoint unusable")

// Path is the checkpoint file in dir.
func Path(dir string) string { return filepath.Join(dir, FileName) }

// corruptAdvice says what to do about a checkpoint gpud refuses.
const corruptAdvice = "the agent does not start on it, so no prepared claim is lost: restore the file from a backup, " +
	"or move it aside and restart the agent (the claims it recorded are then unknown to gpud: delete their pods, " +
	"and remove their CDI specs gpud-dra-<claim UID>.json and any MIG devices gpud created for them)"

// Read reads the checkpoint (capped at fileio.MaxStateBytes) and
// converts it to the latest version; a missing file is an empty
// checkpoint. A temp file left by a write a crash cut short is removed:
// the checkpoint itself is whole (written by rename). A checkpoint that
// cannot be trusted is an error wrapping [ErrCorrupt] that
// names the file and what to do.
func Read(dir string) (Checkpoint, error) {
	path := Path(dir)
	if err := os.Remove(fileio.TempName(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Checkpoint{}, fmt.Errorf("dra: remove the temp file of an interrupted checkpoint write: %w", err)
	}
	return Load(dir)
}

// Load reads and converts the checkpoint, touching nothing: for readers
// beside the running driver (device isolation), for which removing the
// temp file as Read does would race with the driver's own writes (their
// rename then fails).
func Load(dir string) (Checkpoint, error) {
	path := Path(dir)
	data, err := fileio.ReadFile(path, fileio.MaxStateBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return NewCheckpoint(), nil
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("dra: read checkpoint: %w", err)
	}
	cp, err := Decode(data)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %s: %w; %s", ErrCorrupt, path, err, corruptAdvice)
	}
	return cp, nil
}

// Decode parses a checkpoint file of any version this gpud
// knows and converts it to the latest.
func Decode(data []byte) (Checkpoint, error) {
	var head struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Checkpoint{}, fmt.Errorf("not JSON: %w", err)
	}
	if head.Version == nil {
		return Checkpoint{}, errors.New("no version")
	}
	cp := NewCheckpoint()
	var claims map[types.UID]*Claim
	switch *head.Version {
	case checkpointV1:
		var f checkpointFileV1
		if err := strictJSON(data, &f); err != nil {
			return Checkpoint{}, fmt.Errorf("version 1: %w", err)
		}
		claims = f.Claims
	case checkpointV2, checkpointV3:
		var f checkpointFileV2
		if err := strictJSON(data, &f); err != nil {
			return Checkpoint{}, fmt.Errorf("version %d: %w", *head.Version, err)
		}
		sum, err := f.sum()
		if err != nil {
			return Checkpoint{}, err
		}
		if sum != f.Checksum {
			return Checkpoint{}, fmt.Errorf("checksum %08x, want %08x (damaged or edited)", f.Checksum, sum)
		}
		claims = f.Claims
		for g, uid := range f.MIGModeOwners {
			if g == "" || uid == "" {
				return Checkpoint{}, fmt.Errorf("MIG mode owner %q of gpu %q: empty", uid, g)
			}
			cp.MIGModeOwners[g] = uid
		}
	default:
		return Checkpoint{}, fmt.Errorf("version %d unknown: this gpud reads versions %d to %d (a newer gpud wrote it: run that one, or unprepare its claims first)",
			*head.Version, checkpointV1, checkpointVersion)
	}
	for uid, c := range claims {
		if err := validClaim(uid, c); err != nil {
			return Checkpoint{}, err
		}
		if *head.Version < checkpointV3 {
			for _, d := range c.Devices {
				if d.MemoryLimitBytes != 0 {
					return Checkpoint{}, fmt.Errorf("claim %q: device %q: memoryLimitBytes in a version %d checkpoint (version %d added it)",
						uid, d.Device.Name, *head.Version, checkpointV3)
				}
			}
		}
		cp.Claims[uid] = *c
	}
	return cp, nil
}

// strictJSON decodes one JSON value with no unknown fields and nothing
// after it.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the checkpoint")
	}
	return nil
}

// validClaim checks one entry as prepare and unprepare rely on it.
func validClaim(uid types.UID, c *Claim) error {
	switch {
	case uid == "":
		return errors.New("a claim with an empty UID")
	case c == nil:
		return fmt.Errorf("claim %q: null entry", uid)
	case c.State != StatePreparing && c.State != StatePrepared:
		return fmt.Errorf("claim %q: state %q unknown (want %s or %s)", uid, c.State, StatePreparing, StatePrepared)
	}
	for i, d := range c.Devices {
		switch {
		case d.Device.Name == "":
			return fmt.Errorf("claim %q: device %d has no name", uid, i)
		case d.Device.Type != TypeGPU && d.Device.Type != TypeMIG:
			return fmt.Errorf("claim %q: device %q: type %q unknown", uid, d.Device.Name, d.Device.Type)
		case d.Created && d.Device.Type != TypeMIG:
			return fmt.Errorf("claim %q: device %q: created, but not a MIG device", uid, d.Device.Name)
		case d.Device.Type == TypeMIG && d.Device.GPUUUID == "":
			return fmt.Errorf("claim %q: MIG device %q has no GPU", uid, d.Device.Name)
		case c.State == StatePrepared && (d.Creating || (d.Device.Type == TypeMIG && d.Device.MIGUUID == "")):
			return fmt.Errorf("claim %q: prepared, but MIG device %q was not created", uid, d.Device.Name)
		case d.MemoryLimitBytes != 0 && (d.Device.Type != TypeGPU || d.MemoryLimitBytes < d.MemoryBytes || d.MemoryLimitBytes > d.Device.MemoryBytes):
			return fmt.Errorf("claim %q: device %q: memory limit %d bytes outside the request %d to the GPU's %d",
				uid, d.Device.Name, d.MemoryLimitBytes, d.MemoryBytes, d.Device.MemoryBytes)
		}
	}
	return nil
}

// Encode is the checkpoint as this gpud writes it (the latest
// version, with its checksum).
func Encode(cp Checkpoint) ([]byte, error) {
	f := checkpointFileV2{Version: checkpointVersion, Claims: make(map[types.UID]*Claim, len(cp.Claims)), MIGModeOwners: cp.MIGModeOwners}
	for uid, c := range cp.Claims {
		f.Claims[uid] = &c
	}
	sum, err := f.sum()
	if err != nil {
		return nil, err
	}
	f.Checksum = sum
	return json.Marshal(f)
}

// Write replaces the checkpoint atomically and durably.
func Write(dir string, cp Checkpoint) error {
	data, err := Encode(cp)
	if err != nil {
		return fmt.Errorf("dra: encode checkpoint: %w", err)
	}
	if len(data) > fileio.MaxStateBytes {
		return fmt.Errorf("dra: checkpoint of %d claims is larger than %d bytes", len(cp.Claims), fileio.MaxStateBytes)
	}
	if err := fileio.WriteFile(Path(dir), data, 0o600); err != nil {
		return fmt.Errorf("dra: write checkpoint: %w", err)
	}
	return nil
}
