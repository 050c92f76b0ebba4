package mig

import (
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Sentinel errors; the typed errors below map onto them with Is.
var (
	// ErrUnknownProfile is wrapped when a layout names a profile a GPU lacks.
	ErrUnknownProfile = errors.New("mig: unknown profile")
	// ErrBadLayout is wrapped by every error in a layout file's syntax or
	// values, whatever the GPU. A profile this GPU lacks wraps
	// ErrUnknownProfile instead: the same layout may suit another GPU.
	ErrBadLayout = errors.New("mig: bad layout")
	// ErrBusy is wrapped when a plan would destroy a slice in use.
	ErrBusy = errors.New("mig: slice in use")
	// ErrNoFit is wrapped when the desired slices cannot be placed.
	ErrNoFit = errors.New("mig: layout does not fit")
	// ErrVerify is wrapped when the GPU does not hold the planned layout
	// after an apply.
	ErrVerify = errors.New("mig: layout check failed")
	// ErrRolledBack is wrapped when an apply failed and its changes were
	// undone.
	ErrRolledBack = errors.New("mig: apply failed and was rolled back")
	// ErrJournalKept is wrapped when an apply ended (done, or rolled
	// back: see ErrRolledBack) but its journal could not be removed.
	ErrJournalKept = errors.New("mig: apply ended but its journal was not removed")
	// ErrBadJournal is wrapped when a journal cannot be trusted: not
	// JSON, a bad checksum, or a version this gpud does not know.
	ErrBadJournal = errors.New("mig: journal unusable")
	// ErrInterrupted is wrapped when Apply is refused because an earlier
	// apply was cut short and not recovered: its journal holds the layout
	// to go back to, which a new apply would overwrite.
	ErrInterrupted = errors.New("mig: an interrupted apply is not recovered")
)

// BusyError says which slices a plan would destroy while they are in use,
// and who holds them.
type BusyError struct {
	// Slices lists each busy slice with its holders.
	Slices []BusySlice
}

// BusySlice is one slice in use: its GPU, profile, UUID and holders
// ("namespace/pod", "pid 1234").
type BusySlice struct {
	GPU     int      `json:"gpu"`
	Profile string   `json:"profile"`
	UUID    string   `json:"uuid"`
	Holders []string `json:"holders"`
}

func (e *BusyError) Error() string {
	parts := make([]string, len(e.Slices))
	for i, s := range e.Slices {
		parts[i] = fmt.Sprintf("gpu %d %s %s held by %s", s.GPU, s.Profile, s.UUID, strings.Join(s.Holders, ", "))
	}
	return fmt.Sprintf("mig: refusing to destroy slices in use (%s); stop those workloads, or force it (gpud mig apply --force; the agent's --mig-force)", strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// PlacementError says the desired slices of one GPU do not fit around what
// must stay.
type PlacementError struct {
	GPU    int
	Wanted []string // the profiles that could not be placed together
	Around []string // what had to stay where it is ("1g.5gb@2 (busy: ns/pod)")
	// Reason is why the profiles can never fit this GPU together, whatever
	// runs on it ("at most 1 x 4g.40gb per GPU"): no slice to free, nothing
	// to force.
	Reason string
}

func (e *PlacementError) Error() string {
	msg := fmt.Sprintf("mig: gpu %d: %s do not fit under the placement rules", e.GPU, strings.Join(e.Wanted, " + "))
	if e.Reason != "" {
		return msg + ": " + e.Reason + "; choose fewer or smaller profiles for this GPU"
	}
	if len(e.Around) > 0 {
		msg += " around " + strings.Join(e.Around, ", ") + "; free those slices, or force it (gpud mig apply --force; the agent's --mig-force)"
	}
	return msg
}

// Is makes errors.Is(err, ErrNoFit) true.
func (e *PlacementError) Is(target error) bool { return target == ErrNoFit }

// nvmlErr turns an NVML return code into an error, nil for SUCCESS.
func nvmlErr(ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return ret
}
