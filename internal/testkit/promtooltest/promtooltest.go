// Package promtooltest checks Prometheus text exposition with the real
// `promtool check metrics` (Debian's prometheus package). It is imported
// only by _test.go files: the telemetry package's collector tests and the
// end-to-end /metrics tests share it.
package promtooltest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// EnvRequire names the environment variable that turns a missing promtool
// from a skip into a failure. CI sets it to 1 after installing prometheus,
// so a broken install cannot silently skip every check.
const EnvRequire = "GPUD_REQUIRE_PROMTOOL"

// dcgmFindings are the lint findings dcgm-exporter's own names and labels
// draw; keeping those names is the point of DCGM compatibility.
var dcgmFindings = []string{
	`counter metrics should have "_total" suffix`,
	`metric name should not include type 'counter'`,
	`label names should be written in 'snake_case' not 'camelCase'`,
}

// DCGMNaming allows only the findings on DCGM_FI_* families that
// dcgm-exporter's naming draws: every other finding fails the check.
func DCGMNaming(finding string) bool {
	if !strings.HasPrefix(finding, "DCGM_FI_") {
		return false
	}
	for _, a := range dcgmFindings {
		if strings.HasSuffix(finding, a) {
			return true
		}
	}
	return false
}

// CheckMetrics runs `promtool check metrics` on text. The text must parse
// (promtool exit 1 fails the test); each lint finding (exit 3) that allowed
// does not accept is a test error. Without promtool on PATH the test is
// skipped, or fails when $GPUD_REQUIRE_PROMTOOL is 1.
func CheckMetrics(t testing.TB, text []byte, allowed func(finding string) bool) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("promtool not on PATH but %s=1: install Debian's prometheus package (%v)", EnvRequire, err)
		}
		t.Skipf("promtool not on PATH, skipping `promtool check metrics` (apt-get install prometheus; %s=1 makes this a failure)", EnvRequire)
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("promtool check metrics: %v\n%s", err, strings.TrimSpace(string(out)))
	}
	// Exit 3: lint findings only, one a line.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line = strings.TrimSpace(line); line != "" && !allowed(line) {
			t.Errorf("promtool check metrics: %s", line)
		}
	}
}
