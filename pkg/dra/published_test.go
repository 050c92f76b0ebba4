package dra

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// Published, the DRA agent's readiness: not before a check finds the
// slices; then only after publishFailures checks in a row fail, naming the
// latest check's error and the library's publish error.
func TestPublishedVerdicts(t *testing.T) {
	d := &Driver{log: slog.New(slog.DiscardHandler)}
	if err := d.Published(); err == nil || !strings.Contains(err.Error(), "not published yet: not checked yet") {
		t.Fatalf("before any check: %v", err)
	}
	refused := errors.New("connection refused")
	d.recordCheck(refused)
	d.notePublishError("processing ResourceSlice objects", errors.New("forbidden"))
	if err := d.Published(); !errors.Is(err, refused) || !strings.Contains(err.Error(), "processing ResourceSlice objects: forbidden") {
		t.Fatalf("first check failed: %v, want the check's and the library's errors", err)
	}
	d.recordCheck(nil)
	if err := d.Published(); err != nil {
		t.Fatalf("after a good check: %v", err)
	}
	for i := 1; i < publishFailures; i++ {
		d.recordCheck(refused)
		if err := d.Published(); err != nil {
			t.Fatalf("after %d failed checks: %v, want still published", i, err)
		}
	}
	d.recordCheck(refused)
	if err := d.Published(); !errors.Is(err, refused) || !strings.Contains(err.Error(), "not in the API server for 3 checks") {
		t.Fatalf("after %d failed checks: %v", publishFailures, err)
	}
	d.recordCheck(nil)
	if err := d.Published(); err != nil {
		t.Fatalf("after the API server came back: %v", err)
	}
}
