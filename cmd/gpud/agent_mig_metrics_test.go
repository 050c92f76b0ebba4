package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpud/gpud/pkg/simnode"
)

// migMetricsRig is a simulated A100 node (GPU resets allowed, so enabling
// MIG completes), its MIG service, and the MIG metrics on a fresh registry.
func migMetricsRig(t *testing.T) (*simnode.Node, *migComponent, *migMetrics) {
	t.Helper()
	n := simnode.NewBuiltin("dgx-a100")
	svc, err := newMIGService(n, n, "", true, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMIGMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	layouts := filepath.Join(t.TempDir(), "layouts.yaml")
	if err := os.WriteFile(layouts, []byte(cliLayouts), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &migComponent{svc: svc, log: discardLog(), metrics: m, opts: migOptions{layoutFile: layouts}}
	return n, c, m
}

// metricValue reads a counter's or gauge's value.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Counter != nil {
		return out.Counter.GetValue()
	}
	return out.Gauge.GetValue()
}

func checkApplies(t *testing.T, m *migMetrics, source string, want map[string]float64) {
	t.Helper()
	for _, r := range []string{migResultSuccess, migResultPending, migResultFailure} {
		if got := metricValue(t, m.applies.WithLabelValues(source, r)); got != want[r] {
			t.Errorf("gpud_mig_apply_total{source=%q,result=%q} = %v, want %v", source, r, got, want[r])
		}
	}
}

func checkState(t *testing.T, m *migMetrics, want string) {
	t.Helper()
	for _, s := range []string{"pending", "success", "failed"} {
		v := 0.0
		if s == want {
			v = 1
		}
		if got := metricValue(t, m.state.WithLabelValues(s)); got != v {
			t.Errorf("gpud_mig_config_state{state=%q} = %v, want %v", s, got, v)
		}
	}
}

// TestMIGMetricsConfiguredLayout applies the configured layout, then a
// second one while the simulated GPU refuses to create GPU instances: the
// failure is counted and the state says failed until an apply succeeds.
func TestMIGMetricsConfiguredLayout(t *testing.T) {
	n, c, m := migMetricsRig(t)
	checkApplies(t, m, migSourceConfig, nil)

	c.opts.layoutName = "two-3g"
	c.applyConfigured(t.Context())
	checkApplies(t, m, migSourceConfig, map[string]float64{migResultSuccess: 1})
	checkState(t, m, "success")

	n.InjectFault("CreateGpuInstance", simnode.FaultSpec{Times: -1, Return: nvml.ERROR_UNKNOWN})
	c.opts.layoutName = "seven-1g"
	c.applyConfigured(t.Context())
	checkApplies(t, m, migSourceConfig, map[string]float64{migResultSuccess: 1, migResultFailure: 1})
	checkState(t, m, "failed")

	n.ClearFaults()
	c.applyConfigured(t.Context())
	checkApplies(t, m, migSourceConfig, map[string]float64{migResultSuccess: 2, migResultFailure: 1})
	checkState(t, m, "success")
	checkApplies(t, m, migSourceAPI, nil)
}

// TestMIGMetricsAPI counts applies through the admin API, not plans.
func TestMIGMetricsAPI(t *testing.T) {
	n, c, m := migMetricsRig(t)
	mux := http.NewServeMux()
	migAPI{svc: c.svc, metrics: m}.routes(mux)
	post := func(path, config string) int {
		body, _ := json.Marshal(migRequest{Layouts: cliLayouts, Config: config})
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("POST", path, bytes.NewReader(body)))
		return rec.Code
	}
	if code := post("/v1/mig/plan", "two-3g"); code != http.StatusOK {
		t.Fatalf("plan: %d", code)
	}
	checkApplies(t, m, migSourceAPI, nil)
	if code := post("/v1/mig/apply", "two-3g"); code != http.StatusOK {
		t.Fatalf("apply: %d", code)
	}
	n.InjectFault("CreateGpuInstance", simnode.FaultSpec{Times: -1, Return: nvml.ERROR_UNKNOWN})
	if code := post("/v1/mig/apply", "seven-1g"); code == http.StatusOK {
		t.Fatal("apply with CreateGpuInstance failing answered 200")
	}
	checkApplies(t, m, migSourceAPI, map[string]float64{migResultSuccess: 1, migResultFailure: 1})
	checkApplies(t, m, migSourceConfig, nil)
}
