package promtooltest

import (
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// fakeT records failures and skips; Fatal and Skip end its goroutine as
// testing.T's do.
type fakeT struct {
	testing.TB
	fatal, skip string
	errs        []string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeT) Skipf(format string, args ...any) {
	f.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeT) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

func check(t *testing.T, text string) *fakeT {
	f := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		CheckMetrics(f, []byte(text), DCGMNaming)
	}()
	<-done
	return f
}

const good = "# HELP gpud_up Whether it is up.\n# TYPE gpud_up gauge\ngpud_up 1\n"

func TestCheckMetricsWithoutPromtool(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no promtool there
	t.Run("skips by default", func(t *testing.T) {
		t.Setenv(EnvRequire, "")
		f := check(t, good)
		if f.fatal != "" || !strings.Contains(f.skip, "promtool not on PATH") {
			t.Fatalf("fatal %q, skip %q; want a skip naming promtool", f.fatal, f.skip)
		}
	})
	t.Run("fails when required", func(t *testing.T) {
		t.Setenv(EnvRequire, "1")
		f := check(t, good)
		if f.skip != "" || !strings.Contains(f.fatal, EnvRequire+"=1") {
			t.Fatalf("fatal %q, skip %q; want a failure naming %s", f.fatal, f.skip, EnvRequire)
		}
	})
}

func TestCheckMetrics(t *testing.T) {
	if _, err := exec.LookPath("promtool"); err != nil {
		CheckMetrics(t, nil, DCGMNaming) // skips, or fails under GPUD_REQUIRE_PROMTOOL=1
	}
	tests := []struct {
		name      string
		text      string
		wantFatal bool
		wantErrs  []string // substrings of the lint errors, in order
	}{
		{name: "clean", text: good},
		{name: "dcgm counter naming allowed",
			text: "# HELP DCGM_FI_DEV_XID_ERRORS Last Xid.\n# TYPE DCGM_FI_DEV_XID_ERRORS counter\nDCGM_FI_DEV_XID_ERRORS{UUID=\"GPU-1\"} 0\n"},
		{name: "own counter without _total flagged",
			text: "# HELP gpud_restarts Restarts.\n# TYPE gpud_restarts counter\ngpud_restarts 0\n", wantErrs: []string{`gpud_restarts counter metrics should have "_total" suffix`}},
		{name: "unparsable", text: "gpud_up{ 1\n", wantFatal: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := check(t, tc.text)
			if (f.fatal != "") != tc.wantFatal {
				t.Fatalf("fatal %q, want fatal %v", f.fatal, tc.wantFatal)
			}
			if len(f.errs) != len(tc.wantErrs) {
				t.Fatalf("errors %q, want %d", f.errs, len(tc.wantErrs))
			}
			for i, w := range tc.wantErrs {
				if !strings.Contains(f.errs[i], w) {
					t.Errorf("error %q, want %q", f.errs[i], w)
				}
			}
		})
	}
}

func TestDCGMNaming(t *testing.T) {
	tests := []struct {
		finding string
		want    bool
	}{
		{`DCGM_FI_DEV_XID_ERRORS counter metrics should have "_total" suffix`, true},
		{`DCGM_FI_DEV_GPU_UTIL label names should be written in 'snake_case' not 'camelCase'`, true},
		{`gpud_restarts counter metrics should have "_total" suffix`, false},
		{`DCGM_FI_DEV_GPU_UTIL no help text`, false},
	}
	for _, tc := range tests {
		if got := DCGMNaming(tc.finding); got != tc.want {
			t.Errorf("DCGMNaming(%q) = %v, want %v", tc.finding, got, tc.want)
		}
	}
}
