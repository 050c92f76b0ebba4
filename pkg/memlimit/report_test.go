package memlimit

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/gpud/gpud/internal/testkit/promtooltest"
)

// TestStatusAndMetrics: on an r615 node with GPU 1 in MIG mode, /readyz
// groups the GPUs by mode and reason, and gpud_memory_limit_mode has 1
// for each GPU's mode and 0 for the others, labelled by index and UUID;
// promtool finds nothing to lint.
func TestStatusAndMetrics(t *testing.T) {
	_, devs, root := simNode(t, "dgx-h100", "615.40.01", 1)
	m, err := New(Config{CgroupRoot: root, DriverVersion: "615.40.01", MPS: true, Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	want := "memory limits: driver on GPUs 0,2,3,4,5,6,7 (driver 615.40.01 limits GPU memory per cgroup); " +
		"mps on GPU 1 (no driver memory limits (MIG mode on); MPS pinned-memory limits)"
	if s := m.Status(); s != want {
		t.Errorf("Status() =\n%q\nwant\n%q", s, want)
	}
	if s := (&Manager{}).Status(); s != "memory limits: no GPUs" {
		t.Errorf("Status() without GPUs = %q", s)
	}

	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "gpud_memory_limit_mode"); n != 8*len(Modes) {
		t.Errorf("%d series, want %d (every GPU, every mode)", n, 8*len(Modes))
	}
	text, err := testutil.CollectAndFormat(reg, expfmt.TypeTextPlain, "gpud_memory_limit_mode")
	if err != nil {
		t.Fatal(err)
	}
	gpu1, gpu0 := uuidOf(t, devs[1]), uuidOf(t, devs[0])
	for _, line := range []string{
		`gpud_memory_limit_mode{UUID="` + gpu0 + `",gpu="0",mode="driver"} 1`,
		`gpud_memory_limit_mode{UUID="` + gpu0 + `",gpu="0",mode="mps"} 0`,
		`gpud_memory_limit_mode{UUID="` + gpu1 + `",gpu="1",mode="driver"} 0`,
		`gpud_memory_limit_mode{UUID="` + gpu1 + `",gpu="1",mode="mps"} 1`,
		`gpud_memory_limit_mode{UUID="` + gpu1 + `",gpu="1",mode="watchdog"} 0`,
	} {
		if !bytes.Contains(text, []byte(line+"\n")) {
			t.Errorf("metrics lack %s:\n%s", line, text)
		}
	}
	promtooltest.CheckMetrics(t, text, func(string) bool { return false })
	if err := m.Register(reg); err == nil || !strings.Contains(err.Error(), "memlimit: register metrics") {
		t.Errorf("second Register = %v, want a wrapped error", err)
	}
}
