package wait

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !Sleep(t.Context(), time.Minute) {
			t.Fatal("Sleep(1m) = false with a live ctx")
		}
		if got := time.Since(start); got != time.Minute {
			t.Fatalf("slept %s, want 1m", got)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start = time.Now()
		if Sleep(ctx, time.Hour) {
			t.Fatal("Sleep(1h) = true though ctx ended after 1s")
		}
		if got := time.Since(start); got != time.Second {
			t.Fatalf("returned after %s, want 1s (when ctx ended)", got)
		}
	})
}
