package dra

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/pkg/dra/prepared"
)

// The driver's vocabulary for what it prepared; the types and the
// checkpoint file are pkg/dra/prepared's.
type (
	// DeviceRef is what a published device is on this node: what prepare
	// needs to deliver it.
	DeviceRef = prepared.DeviceRef
	// Placement is where a MIG GPU instance sits.
	Placement = prepared.Placement
	// PreparedDevice is one allocated device of a prepared claim.
	PreparedDevice = prepared.Device
	// PreparedClaim is one claim in the checkpoint.
	PreparedClaim = prepared.Claim
)

// CheckpointName is the file in the plugin directory that records prepared
// claims.
const CheckpointName = prepared.FileName

// ErrCorruptCheckpoint is wrapped when the checkpoint cannot be trusted.
var ErrCorruptCheckpoint = prepared.ErrCorrupt

// ReadPrepared returns the claims the checkpoint in stateDir records as
// prepared (or half-prepared), for readers beside the running driver
// (device isolation). It only reads (prepared.Load).
func ReadPrepared(stateDir string) (map[types.UID]PreparedClaim, error) {
	cp, err := prepared.Load(stateDir)
	if err != nil {
		return nil, err
	}
	return cp.Claims, nil
}
