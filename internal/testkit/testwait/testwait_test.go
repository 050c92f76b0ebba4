package testwait

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeT records a fatal failure and ends its goroutine, as testing.T does.
type fakeT struct {
	testing.TB
	ctx context.Context

	mu       sync.Mutex
	fatal    string
	errors   []string
	cleanups []func()
}

func (f *fakeT) Helper()                  {}
func (f *fakeT) Context() context.Context { return f.ctx }
func (f *fakeT) Cleanup(fn func())        { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// run calls fn with a fakeT on its own goroutine and returns the fatal
// message ("" when fn returned normally).
func run(t *testing.T, fn func(f *fakeT)) string {
	t.Helper()
	f := &fakeT{TB: t, ctx: t.Context()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.fatal
}

func TestFor(t *testing.T) {
	tests := []struct {
		name      string
		wait      func(f *fakeT)
		wantFatal []string // substrings; none: succeeds
	}{
		{name: "true at once", wait: func(f *fakeT) { For(f, time.Second, "x", func() bool { return true }) }},
		{name: "true on the third call", wait: func(f *fakeT) {
			n := 0
			For(f, 10*time.Second, "x", func() bool { n++; return n == 3 })
		}},
		{name: "never true names what it waited for", wait: func(f *fakeT) {
			For(f, 30*time.Millisecond, "the kubelet to register", func() bool { return false })
		}, wantFatal: []string{"timed out after 30ms waiting for the kubelet to register"}},
		{name: "ForErr reports the last error", wait: func(f *fakeT) {
			n := 0
			ForErr(f, 30*time.Millisecond, "the admin socket", func() error { n++; return fmt.Errorf("dial %d", n) })
		}, wantFatal: []string{"waiting for the admin socket; last error: dial "}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := run(t, tc.wait)
			if len(tc.wantFatal) == 0 && got != "" {
				t.Fatalf("failed: %s", got)
			}
			for _, w := range tc.wantFatal {
				if !strings.Contains(got, w) {
					t.Errorf("failure %q, want it to contain %q", got, w)
				}
			}
			if len(tc.wantFatal) > 0 && strings.Contains(got, "not yet") {
				t.Errorf("failure %q leaks the internal not-yet error", got)
			}
		})
	}
}

func TestForStopsWhenTestEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	f := &fakeT{TB: t, ctx: ctx}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		For(f, time.Hour, "never", func() bool { return false })
	}()
	<-done
	if !strings.Contains(f.fatal, "test ended while waiting for never") || time.Since(start) > time.Minute {
		t.Fatalf("fatal %q after %v, want a prompt 'test ended' failure", f.fatal, time.Since(start))
	}
}

func TestRun(t *testing.T) {
	tests := []struct {
		name    string
		run     func(ctx context.Context) error
		wantErr string
	}{
		{name: "stops cleanly on cancel", run: func(ctx context.Context) error { <-ctx.Done(); return nil }},
		{name: "error reported naming the component", run: func(ctx context.Context) error {
			<-ctx.Done()
			return errors.New("boom")
		}, wantErr: "sampler: Run() = boom"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeT{TB: t, ctx: t.Context()}
			started := make(chan struct{})
			Run(f, "sampler", func(ctx context.Context) error { close(started); return tc.run(ctx) })
			<-started
			if len(f.cleanups) != 1 {
				t.Fatalf("%d cleanups registered, want 1", len(f.cleanups))
			}
			f.cleanups[0]() // cancels and waits: returns only once run did
			got := strings.Join(f.errors, "; ")
			if got != tc.wantErr {
				t.Fatalf("errors %q, want %q", got, tc.wantErr)
			}
		})
	}
}
