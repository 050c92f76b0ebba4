package mig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/gpud/gpud/internal/fileio"
)

// journal is what an apply in progress records: where it started and where
// it is going.
type journal struct {
	Config string  `json:"config"`
	Start  State   `json:"start"`
	Want   Desired `json:"want"`
}

// The journal file's versions. A newer gpud reads every older one, so an
// upgrade in the middle of an interrupted apply still finishes or undoes
// it.
const (
	// journalV1 (gpud before issue 24) is the bare journal, no version
	// field and no checksum.
	journalV1 = 1
	// journalV2 adds the version and a CRC-32C checksum.
	journalV2      = 2
	journalVersion = journalV2
)

// journalFileV2 is version 2 on disk; Checksum is the CRC-32C (Castagnoli)
// of its JSON encoding with Checksum zero.
type journalFileV2 struct {
	Version  int     `json:"version"`
	Checksum uint32  `json:"checksum"`
	Config   string  `json:"config"`
	Start    State   `json:"start"`
	Want     Desired `json:"want"`
}

var crc32c = crc32.MakeTable(crc32.Castagnoli)

func (f journalFileV2) sum() (uint32, error) {
	f.Checksum = 0
	data, err := json.Marshal(f)
	if err != nil {
		return 0, err
	}
	return crc32.Checksum(data, crc32c), nil
}

func encodeJournal(j journal) ([]byte, error) {
	f := journalFileV2{Version: journalVersion, Config: j.Config, Start: j.Start, Want: j.Want}
	sum, err := f.sum()
	if err != nil {
		return nil, err
	}
	f.Checksum = sum
	return json.Marshal(f)
}

// decodeJournal reads a journal of any version this gpud knows.
func decodeJournal(data []byte) (journal, error) {
	var head struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return journal{}, fmt.Errorf("not JSON: %w", err)
	}
	switch {
	case head.Version == nil: // version 1 had no version field
		var j journal
		if err := json.Unmarshal(data, &j); err != nil {
			return journal{}, fmt.Errorf("version %d: %w", journalV1, err)
		}
		return j, nil
	case *head.Version == journalV2:
		var f journalFileV2
		if err := json.Unmarshal(data, &f); err != nil {
			return journal{}, fmt.Errorf("version %d: %w", journalV2, err)
		}
		sum, err := f.sum()
		if err != nil {
			return journal{}, err
		}
		if sum != f.Checksum {
			return journal{}, fmt.Errorf("checksum %08x, want %08x (damaged or edited)", f.Checksum, sum)
		}
		return journal{Config: f.Config, Start: f.Start, Want: f.Want}, nil
	}
	return journal{}, fmt.Errorf("version %d unknown: this gpud reads versions %d to %d (a newer gpud wrote it: finish the apply with that one)",
		*head.Version, journalV1, journalVersion)
}

// Interrupted is an apply a crash cut short, as its journal records it.
type Interrupted struct {
	// Journal is the journal's path.
	Journal string `json:"journal"`
	// Config is the layout that was being applied.
	Config string `json:"config"`
	// GPUs are the indexes of the GPUs it was changing (sorted); their
	// layouts may be half-applied.
	GPUs []int `json:"gpus"`
	// Start is the node's layout before the apply (the rollback target),
	// Want the layout it was going to.
	Start State   `json:"start"`
	Want  Desired `json:"want"`
}

// ReadJournal reports the apply a crash cut short, from the journal at
// path: nil when there is no journal (no apply was interrupted). It
// changes nothing. A journal that cannot be read or trusted is an error
// naming the file.
func ReadJournal(path string) (*Interrupted, error) {
	j, ok, err := readJournal(path)
	if err != nil || !ok {
		return nil, err
	}
	in := &Interrupted{Journal: path, Config: j.Config, Start: j.Start, Want: j.Want}
	for g := range j.Want.GPUs {
		in.GPUs = append(in.GPUs, g)
	}
	sort.Ints(in.GPUs)
	return in, nil
}

func readJournal(path string) (journal, bool, error) {
	data, err := fileio.ReadFile(path, fileio.MaxStateBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return journal{}, false, nil
	}
	if err != nil {
		return journal{}, false, fmt.Errorf("mig: read journal: %w", err)
	}
	j, err := decodeJournal(data)
	if err != nil {
		return journal{}, false, fmt.Errorf("%w: %s: %w; move it aside and check the GPUs with `gpud mig show`, then apply the layout again", ErrBadJournal, path, err)
	}
	return j, true, nil
}

// removeStaleJournalTemp removes the temp file of a journal write a crash
// cut short. The journal is written once, before an apply changes
// anything, so such a file records nothing that happened.
func (a *Applier) removeStaleJournalTemp() error {
	if err := os.Remove(fileio.TempName(a.journal)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("mig: remove the temp file of an interrupted journal write: %w", err)
	}
	return nil
}

func (a *Applier) writeJournal(j journal) error {
	if a.journal == "" {
		return nil
	}
	data, err := encodeJournal(j)
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

// interrupted reads the journal of an apply a crash cut short, after
// removing the temp file of a journal write cut short. found says whether
// there is one to act on (a journal that cannot be read counts: err says
// why); no journal configured, none on disk, or a failed temp removal do
// not.
func (a *Applier) interrupted() (j journal, found bool, err error) {
	if a.journal == "" {
		return j, false, nil
	}
	if err := a.removeStaleJournalTemp(); err != nil {
		return j, false, err
	}
	j, ok, err := readJournal(a.journal)
	return j, ok || err != nil, err
}

// Recover finishes an apply that a crash cut short: when the journal
// exists, it plans from the node's current layout to the journaled target
// and applies that (incomplete GPU instances are completed or removed); if
// that fails, Apply has already rolled those GPUs back, and the remaining
// GPUs are put back to the journaled starting layout. It reports whether
// there was anything to recover. busy guards slices that came into use
// meanwhile.
func (a *Applier) Recover(ctx context.Context, busy Busy) (bool, Result, error) {
	j, found, err := a.interrupted()
	if !found || err != nil {
		return found, Result{}, err
	}
	a.log.Warn("mig apply was interrupted, recovering", "config", j.Config, "journal", a.journal)
	cur, err := ReadState(a.lib)
	if err != nil {
		return true, Result{}, err
	}
	plan, err := NewPlan(cur, j.Want, busy, Options{})
	if err == nil {
		// The journal's starting layout is the rollback target, not cur.
		res, aerr := a.apply(ctx, j.Start, j.Want, plan)
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

// RollBack undoes an apply a crash cut short: the GPUs it was changing go
// back to the journal's starting layout (the same mode, the same profiles
// at the same placements) through a plan and apply like any other, so a
// busy slice is kept unless force. It reports whether there was anything
// to roll back; the journal is removed when the rollback is done.
func (a *Applier) RollBack(ctx context.Context, busy Busy, force bool) (bool, Result, error) {
	j, found, err := a.interrupted()
	if !found || err != nil {
		return found, Result{}, err
	}
	cur, err := ReadState(a.lib)
	if err != nil {
		return true, Result{}, err
	}
	back := Desired{Config: "rollback of " + j.Config, GPUs: map[int]GPUWants{}}
	for i := range j.Want.GPUs {
		if g := j.Start.GPU(i); g != nil {
			back.GPUs[i] = layoutOf(*g)
		}
	}
	plan, err := NewPlan(cur, back, busy, Options{Force: force})
	if err != nil {
		return true, Result{Plan: plan, State: cur}, fmt.Errorf("mig: roll back %q: %w", j.Config, err)
	}
	// apply replaces the journal with the rollback's own, so a crash now
	// is recovered like any apply, and removes it at the end.
	res, err := a.apply(ctx, cur, back, plan)
	if err == nil && plan.Empty() {
		err = a.removeJournal()
	}
	return true, res, err
}
