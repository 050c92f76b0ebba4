package hack_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFuzzOneRetriesOnlyTheDeadlineRace runs hack/fuzz-one.sh with a fake
// go whose runs answer in turn as scripted: a bare "context deadline
// exceeded" (Go 1.26's -fuzztime race, golang/go#75804) is retried once,
// while a written failing input, a second race or any other error fails
// with go's exit status.
func TestFuzzOneRetriesOnlyTheDeadlineRace(t *testing.T) {
	const race = "--- FAIL: FuzzX (3.01s)\n    context deadline exceeded\nFAIL\n"
	const finding = "--- FAIL: FuzzX (1.2s)\n    x_test.go:9: bad\n    Failing input written to testdata/fuzz/FuzzX/ab12\nFAIL\n"
	type run struct {
		out string
		rc  int
	}
	tests := []struct {
		name   string
		runs   []run
		wantRC int
		calls  int
	}{
		{"pass", []run{{"ok\n", 0}}, 0, 1},
		{"race then pass", []run{{race, 1}, {"ok\n", 0}}, 0, 2},
		{"race twice", []run{{race, 1}, {race, 1}}, 1, 2},
		{"finding", []run{{finding, 1}}, 1, 1},
		{"finding after a deadline line", []run{{finding + race, 1}}, 1, 1},
		{"build error", []run{{"x.go:1: syntax error\n", 2}}, 2, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var script strings.Builder
			script.WriteString("#!/bin/sh\nn=$(cat " + filepath.Join(dir, "n") + " 2>/dev/null || echo 0); n=$((n+1)); echo $n > " + filepath.Join(dir, "n") + "\n")
			for i, r := range tc.runs {
				script.WriteString("if [ $n -eq " + string(rune('1'+i)) + " ]; then printf '%s' '" + r.out + "'; exit " + string(rune('0'+r.rc)) + "; fi\n")
			}
			script.WriteString("echo unexpected run; exit 99\n")
			fake := filepath.Join(dir, "go")
			if err := os.WriteFile(fake, []byte(script.String()), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("./fuzz-one.sh", "./pkg/x", "FuzzX", "3s")
			cmd.Env = append(os.Environ(), "GO="+fake)
			out, err := cmd.CombinedOutput()
			rc := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				rc = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			calls, _ := os.ReadFile(filepath.Join(dir, "n"))
			if rc != tc.wantRC || strings.TrimSpace(string(calls)) != string(rune('0'+tc.calls)) {
				t.Fatalf("rc %d after %s runs, want rc %d after %d; output:\n%s", rc, strings.TrimSpace(string(calls)), tc.wantRC, tc.calls, out)
			}
			if retried := strings.Contains(string(out), "running it once more"); retried != (tc.calls == 2) {
				t.Errorf("retry message shown %v, want %v:\n%s", retried, tc.calls == 2, out)
			}
		})
	}
}
