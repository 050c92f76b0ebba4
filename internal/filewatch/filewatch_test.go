package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWatcherCallsOncePerBurst(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	other := filepath.Join(dir, "other.yaml")
	if err := os.WriteFile(path, []byte("a: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	changes := make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	ready := make(chan struct{})
	// The debounce is wide enough that a burst stays one burst on a loaded
	// machine (50ms split bursts at a load average of 12).
	w := Watcher{Paths: []string{path, ""}, Debounce: 250 * time.Millisecond, OnChange: func() { changes <- struct{}{} }}
	go func() {
		close(ready)
		done <- w.Run(ctx)
	}()
	<-ready
	// fsnotify needs the watch in place before the writes; rewrite until
	// the first change arrives.
	deadline := time.After(10 * time.Second)
	for got := false; !got; {
		for i := range 3 { // one burst
			if err := os.WriteFile(path, []byte{'a', ':', ' ', byte('0' + i), '\n'}, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-changes:
			got = true
		case <-time.After(4 * w.Debounce): // a rewrite sooner would restart the debounce
		case <-deadline:
			t.Fatal("no change reported for writes to a watched file")
		}
	}
	// Let the retries' events settle, then one burst of writes is one
	// change.
	settle := func() {
		for {
			select {
			case <-changes:
			case <-time.After(4 * w.Debounce):
				return
			}
		}
	}
	settle()
	for i := range 5 {
		if err := os.WriteFile(path, []byte{'b', ':', ' ', byte('0' + i), '\n'}, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-changes:
	case <-time.After(10 * time.Second):
		t.Fatal("a burst of writes was not reported")
	}
	select {
	case <-changes:
		t.Fatal("one burst of writes was reported twice")
	case <-time.After(4 * w.Debounce):
	}
	// An unrelated file in the same dir is ignored.
	if err := os.WriteFile(other, []byte("b: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
		t.Fatal("a write to an unwatched file in the same dir was reported")
	case <-time.After(600 * time.Millisecond):
	}
	// A replace (write elsewhere, rename over) is a change.
	tmp := filepath.Join(dir, ".tmp")
	if err := os.WriteFile(tmp, []byte("a: 9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
	case <-time.After(10 * time.Second):
		t.Fatal("replacing the watched file was not reported")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run() = %v", err)
	}
}

func TestWatcherNoWatchableDir(t *testing.T) {
	w := Watcher{Paths: []string{filepath.Join(t.TempDir(), "missing", "config.yaml")}, OnChange: func() {}}
	if err := w.Run(t.Context()); err == nil {
		t.Fatal("Run() = nil for a file in a missing dir, want an error")
	}
}
