// Package fileio reads and writes the files gpud's users and peers hand it:
// reads are capped so a wrong path (/dev/zero, a huge log) cannot grow the
// process without bound, and writes are atomic and durable so a crash leaves
// the old file or the new one, never half of either.
package fileio

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Size limits for the kinds of files gpud reads. They are far above any real
// file of that kind and far below what would hurt a node.
const (
	MaxConfigBytes = 4 << 20  // agent config, sharing config, MIG layouts, queue files, simnode profiles
	MaxStateBytes  = 16 << 20 // MIG journal, simnode state
	MaxTraceBytes  = 1 << 30  // trace CSVs (read as a stream; this caps a whole-file read)
	MaxBodyBytes   = 1 << 20  // admin API request bodies
)

// ErrTooLarge is returned (wrapped) when a file is larger than its limit.
var ErrTooLarge = errors.New("file too large")

// ReadFile reads path, refusing more than limit bytes. The error names the
// path and the limit, so a user who pointed a flag at the wrong file sees it.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("%s: is a directory, want a file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w: more than %d bytes", path, ErrTooLarge, limit)
	}
	return data, nil
}

// TempName is the fixed name WriteFile writes before renaming into place: a
// crash mid-write leaves at most this one file beside path, which the next
// write reuses, instead of a new random temp file per crash.
func TempName(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
}

// WriteFile replaces path with data atomically and durably: it writes a
// temp file beside path, fsyncs it, renames it into place and fsyncs the
// directory. On error path is unchanged and the temp file is removed.
// Callers serialize writes to one path.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	tmp := TempName(path)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, werr)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		err = d.Sync()
		_ = d.Close()
		if err != nil {
			return fmt.Errorf("write %s: sync directory: %w", path, err)
		}
	}
	return nil
}
