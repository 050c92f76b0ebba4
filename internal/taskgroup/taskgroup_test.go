package taskgroup

import (
	"context"
	"errors"
	"testing"
	"time"
)

// blocker runs until its ctx ends and records that it did.
func blocker(stopped chan<- string, name string) Task {
	return Task{Name: name, Run: func(ctx context.Context) error {
		<-ctx.Done()
		stopped <- name
		return nil
	}}
}

func TestRun(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		fail    Task // runs beside two blockers
		cancel  bool // cancel the parent ctx instead
		wantErr string
		wantIs  error
	}{
		{name: "first error stops the others", fail: Task{Name: "http", Run: func(context.Context) error { return boom }},
			wantErr: "http: boom", wantIs: boom},
		{name: "unnamed error as it is", fail: Task{Run: func(context.Context) error { return boom }},
			wantErr: "boom", wantIs: boom},
		{name: "canceled stops the others, no error", fail: Task{Name: "scheduler", Run: func(context.Context) error { return context.Canceled }}},
		{name: "parent ctx ends", cancel: true, fail: Task{Name: "quiet", Run: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			stopped := make(chan string, 2)
			done := make(chan error, 1)
			go func() { done <- Run(ctx, []Task{blocker(stopped, "a"), tc.fail, blocker(stopped, "b")}) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return: the others were not stopped")
			}
			if len(stopped) != 2 {
				t.Errorf("%d of 2 other tasks stopped before Run returned", len(stopped))
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Run = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tc.wantErr || !errors.Is(err, tc.wantIs) {
				t.Fatalf("Run = %v, want %q wrapping %v", err, tc.wantErr, tc.wantIs)
			}
		})
	}
}

// TestRunEarlyNil: a task that returns nil ends alone; the others run on
// until the parent ctx ends.
func TestRunEarlyNil(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan string, 1)
	done := make(chan error, 1)
	ended := make(chan struct{})
	go func() {
		done <- Run(ctx, []Task{{Name: "once", Run: func(context.Context) error { close(ended); return nil }}, blocker(stopped, "a")})
	}()
	<-ended
	select {
	case err := <-done:
		t.Fatalf("Run returned %v after a task returned nil, want the others to run on", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v after the parent ctx ended, want nil", err)
	}
	if len(stopped) != 1 {
		t.Error("the running task did not stop")
	}
}

func TestRunNone(t *testing.T) {
	if err := Run(t.Context(), nil); err != nil {
		t.Fatalf("Run(no tasks) = %v", err)
	}
}
