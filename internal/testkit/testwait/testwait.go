// Package testwait holds the waits of tests that run real sockets,
// processes or goroutines, where testing/synctest cannot stand in for the
// clock: wait for a condition with a failure that names what was awaited,
// and run a component for the rest of a test. It is imported only by
// _test.go files.
package testwait

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Poll intervals: the first retries come fast, a long wait settles at
// maxInterval so a loaded machine is not kept busy.
const (
	firstInterval = 10 * time.Millisecond
	maxInterval   = 250 * time.Millisecond
)

// For calls cond until it returns true, and fails the test with "timed out
// after <timeout> waiting for <what>" when timeout passes first. cond runs
// on the test's goroutine, so it may call t.Fatal. It may also act before
// it checks: a loop that repeats an injection until a watcher has
// registered is For with a cond that injects, then looks for the effect.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ForErr(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// errNotYet is For's "not yet": it has nothing more to say.
var errNotYet = errors.New("not yet")

// ForErr calls try until it returns nil, and fails the test naming what
// it waited for and try's last error when timeout passes first.
func ForErr(t testing.TB, timeout time.Duration, what string, try func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := firstInterval
	for {
		err := try()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("timed out after %v waiting for %s", timeout, what)
			}
			t.Fatalf("timed out after %v waiting for %s; last error: %v", timeout, what, err)
		}
		select {
		case <-time.After(interval):
		case <-t.Context().Done():
			t.Fatalf("test ended while waiting for %s", what)
		}
		interval = min(2*interval, maxInterval)
	}
}

// Run runs run(ctx) in a goroutine for the rest of the test. At cleanup it
// cancels ctx, waits for run to return and fails the test naming the
// component if run returned an error.
func Run(t testing.TB, name string, run func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: Run() = %v", name, err)
		}
	})
}
