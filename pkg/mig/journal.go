package mig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpud/gpud/internal/fileio"
)

// journal is what an apply in progress records: where it started and where
// it is going.
type journal struct {
	Config string  `json:"config"`
	Start  State   `json:"start"`
	Want   Desired `json:"want"`
}

func (a *Applier) writeJournal(j journal) error {
	if a.journal == "" {
		return nil
	}
	data, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("mig: journal: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(a.journal), 0o700); err != nil {
		return fmt.Errorf("mig: journal dir: %w", err)
	}
	// Atomic and durable: after a crash the journal is whole or absent.
	if err := fileio.WriteFile(a.journal, data, 0o600); err != nil {
		return fmt.Errorf("mig: journal: %w", err)
	}
	return nil
}

// removeJournal removes the journal of an apply that ended (done, or
// rolled back). A journal that stays would make the next start take the
// ended apply for an interrupted one and redo it, so the error (wrapping
// ErrJournalKept) goes back to the caller.
func (a *Applier) removeJournal() error {
	if a.journal == "" {
		return nil
	}
	if err := os.Remove(a.journal); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s (the next start would redo this apply; remove it): %w", ErrJournalKept, a.journal, err)
	}
	return nil
}

// Recover finishes an apply that a crash cut short: when the journal
// exists, it plans from the node's current layout to the journaled target
// and applies that (incomplete GPU instances are completed or removed); if
// that fails, Apply has already rolled those GPUs back, and the remaining
// GPUs are put back to the journaled starting layout. It reports whether
// there was anything to recover. busy guards slices that came into use
// meanwhile.
func (a *Applier) Recover(ctx context.Context, busy Busy) (bool, Result, error) {
	if a.journal == "" {
		return false, Result{}, nil
	}
	data, err := fileio.ReadFile(a.journal, fileio.MaxStateBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return false, Result{}, nil
	}
	if err != nil {
		return true, Result{}, fmt.Errorf("mig: read journal: %w", err)
	}
	var j journal
	if err := json.Unmarshal(data, &j); err != nil {
		return true, Result{}, fmt.Errorf("mig: journal %s is corrupt (%w); remove it and apply the layout again", a.journal, err)
	}
	a.log.Warn("mig apply was interrupted, recovering", "config", j.Config, "journal", a.journal)
	cur, err := ReadState(a.lib)
	if err != nil {
		return true, Result{}, err
	}
	plan, err := NewPlan(cur, j.Want, busy, Options{})
	if err == nil {
		// The journal's starting layout is the rollback target, not cur.
		res, aerr := a.Apply(ctx, j.Start, j.Want, plan)
		if aerr == nil {
			// An empty plan (the layout was already in place) makes
			// Apply return before it touches the journal.
			aerr = a.removeJournal()
		}
		return true, res, aerr
	}
	a.log.Warn("mig recovery cannot finish the layout, restoring the start", "err", err)
	var gpus []int
	for i := range j.Want.GPUs {
		gpus = append(gpus, i)
	}
	if rbErr := a.rollback(j.Start, gpus); rbErr != nil {
		return true, Result{}, fmt.Errorf("mig: recover %q: %w; restoring the start failed: %w", j.Config, err, rbErr)
	}
	jerr := a.removeJournal()
	st, serr := ReadState(a.lib)
	return true, Result{State: st}, errors.Join(fmt.Errorf("%w: recover %q: %w", ErrRolledBack, j.Config, err), jerr, serr)
}
