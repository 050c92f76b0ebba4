package migctl

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpud/gpud/pkg/simnode"
)

// metricsRig is a simulated A100 node (GPU resets allowed, so enabling
// MIG completes), a controller on its MIG service, and the MIG metrics on
// a fresh registry.
func metricsRig(t *testing.T) (*simnode.Node, *Controller, *Metrics) {
	t.Helper()
	n := simnode.NewBuiltin("dgx-a100")
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Service: newService(t, n, "", true, nil), Log: discardLog(), Metrics: m, Layout: Layout{File: writeLayouts(t)}})
	if err != nil {
		t.Fatal(err)
	}
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

func checkApplies(t *testing.T, m *Metrics, source string, want map[string]float64) {
	t.Helper()
	for _, r := range []string{ResultSuccess, ResultPending, ResultFailure} {
		if got := metricValue(t, m.applies.WithLabelValues(source, r)); got != want[r] {
			t.Errorf("gpud_mig_apply_total{source=%q,result=%q} = %v, want %v", source, r, got, want[r])
		}
	}
}

func checkState(t *testing.T, m *Metrics, want string) {
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

// TestMetricsConfiguredLayout applies the configured layout, then a
// second one while the simulated GPU refuses to create GPU instances: the
// failure is counted and the state says failed until an apply succeeds.
func TestMetricsConfiguredLayout(t *testing.T) {
	n, c, m := metricsRig(t)
	checkApplies(t, m, SourceConfig, nil)

	c.layout.Name = "two-3g"
	c.applyConfigured(t.Context())
	checkApplies(t, m, SourceConfig, map[string]float64{ResultSuccess: 1})
	checkState(t, m, "success")

	n.InjectFault("CreateGpuInstance", simnode.FaultSpec{Times: -1, Return: nvml.ERROR_UNKNOWN})
	c.layout.Name = "seven-1g"
	c.applyConfigured(t.Context())
	checkApplies(t, m, SourceConfig, map[string]float64{ResultSuccess: 1, ResultFailure: 1})
	checkState(t, m, "failed")

	n.ClearFaults()
	c.applyConfigured(t.Context())
	checkApplies(t, m, SourceConfig, map[string]float64{ResultSuccess: 2, ResultFailure: 1})
	checkState(t, m, "success")
	checkApplies(t, m, SourceAPI, nil)
}

// TestMetricsAPI counts applies through the admin API, not plans.
func TestMetricsAPI(t *testing.T) {
	n, c, m := metricsRig(t)
	mux := http.NewServeMux()
	API{Service: c.cfg.Service, Metrics: m}.Routes(mux)
	post := func(path, config string) int {
		body, _ := json.Marshal(Request{Layouts: testLayouts, Config: config})
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("POST", path, bytes.NewReader(body)))
		return rec.Code
	}
	if code := post("/v1/mig/plan", "two-3g"); code != http.StatusOK {
		t.Fatalf("plan: %d", code)
	}
	checkApplies(t, m, SourceAPI, nil)
	if code := post("/v1/mig/apply", "two-3g"); code != http.StatusOK {
		t.Fatalf("apply: %d", code)
	}
	n.InjectFault("CreateGpuInstance", simnode.FaultSpec{Times: -1, Return: nvml.ERROR_UNKNOWN})
	if code := post("/v1/mig/apply", "seven-1g"); code == http.StatusOK {
		t.Fatal("apply with CreateGpuInstance failing answered 200")
	}
	checkApplies(t, m, SourceAPI, map[string]float64{ResultSuccess: 1, ResultFailure: 1})
	checkApplies(t, m, SourceConfig, nil)
}
