// Package filewatch is the agent's one watcher of config files: it calls
// back, debounced, when one of a few files is written or replaced,
// including a Kubernetes ConfigMap's atomic `..data` swap.
package filewatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long a burst of events (an editor's write and
// rename, a ConfigMap swap) is waited out before the callback.
const DefaultDebounce = 300 * time.Millisecond

// Watcher watches Paths (their directories, since editors and ConfigMaps
// replace files) and calls OnChange once per burst of changes.
type Watcher struct {
	// Paths are the files to watch; empty ones are skipped.
	Paths []string
	// Debounce is the quiet time before OnChange; zero means
	// DefaultDebounce.
	Debounce time.Duration
	// OnChange is called on Run's goroutine. Required.
	OnChange func()
	// Log gets watcher errors (a queue overflow, say); nil discards them.
	Log *slog.Logger
}

// Run watches until ctx ends and returns nil then. It returns an error
// when no watch can be set up; a directory that cannot be watched while
// others can is logged.
func (w Watcher) Run(ctx context.Context) error {
	log := w.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	debounce := w.Debounce
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("filewatch: %w", err)
	}
	defer fw.Close()
	watched, err := w.add(fw, log)
	if err != nil {
		return err
	}
	timer := time.NewTimer(debounce)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			// Any event on a watched name, or a ConfigMap's ..data swap,
			// is a change.
			if watched[ev.Name] || filepath.Base(ev.Name) == "..data" {
				timer.Reset(debounce)
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			// A lost event (queue overflow) may have been a change.
			log.Warn("config watch error, rereading", "err", err)
			timer.Reset(debounce)
		case <-timer.C:
			w.OnChange()
		}
	}
}

// add watches the directory of every path and returns the absolute paths.
// It fails when no directory could be watched; one failing while others
// work is logged.
func (w Watcher) add(fw *fsnotify.Watcher, log *slog.Logger) (map[string]bool, error) {
	watched := map[string]bool{}
	var errs []error
	for _, p := range w.Paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("filewatch: %s: %w", p, err))
			continue
		}
		watched[abs] = true
		if err := fw.Add(filepath.Dir(abs)); err != nil {
			errs = append(errs, fmt.Errorf("filewatch: watch %s: %w", filepath.Dir(abs), err))
		}
	}
	if len(errs) > 0 {
		if len(fw.WatchList()) == 0 {
			return nil, errors.Join(errs...)
		}
		log.Warn("some config files are not watched, their changes need a restart", "err", errors.Join(errs...))
	}
	return watched, nil
}
