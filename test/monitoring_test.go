package test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/jobsim"
	"github.com/gpud/gpud/pkg/scheduler"
	"github.com/gpud/gpud/pkg/scheduler/decide"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/telemetry"
	"github.com/gpud/gpud/test/k8senv"
	"github.com/gpud/gpud/test/promtest"
)

// The dashboards are tested the way a user sees them: a real Prometheus
// (Debian's prometheus package) scrapes `gpud agent --simulate dgx-h100`
// and every query of a dashboard must return series.
//
// Three targets are scraped. The agent binary, with MIG on GPUs 0 and 1
// (so the per-MIG-instance series and the MIG layout exist). An in-process
// sampler over a second simulated H100 ("events-node") that has had what
// an idle simulated node never has: an Xid 79 on GPU 2 and a compute
// process on GPU 0, so the Xid and per-pod memory panels have data too.
// And pkg/scheduler on a real kube-apiserver with a pod it cannot place,
// for the scheduler panels.

// monMIGLayouts puts two 3g.40gb slices on GPUs 0 and 1.
const monMIGLayouts = `version: v1
mig-configs:
  dashboard:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
    - devices: [2, 3, 4, 5, 6, 7]
      mig-enabled: false
`

// monDashboardVars are what the dashboards' variables are set to when a
// user picks All.
var monDashboardVars = map[string]string{"datasource": "prometheus", "Hostname": ".*", "gpu": ".*"}

// monAgent runs the gpud binary on a simulated dgx-h100 with MIG slices
// and returns its metrics address and Hostname label once /metrics has GPM
// series for the MIG instances.
func monAgent(t *testing.T, dir string) (addr, hostname string) {
	t.Helper()
	bin := buildGpud(t)
	layouts, cfg := filepath.Join(dir, "mig-layouts.yaml"), filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(layouts, []byte(monMIGLayouts), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("mig-config-file: "+layouts+"\nmig-config: dashboard\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr = k8senv.FreeAddr(t)
	startAgent(t, bin, dir, "--simulate", "dgx-h100", "--config", cfg, "--sim-state-file", filepath.Join(dir, "sim-state.json"),
		"--http-addr", addr, "--device-plugin-dir", "", "--mig-reset-gpus", "--sample-interval", "500ms", "--node-labels=false")
	testwait.ForErr(t, waitTimeout, "the agent's /metrics to have GPM series of its MIG instances", func() error {
		mfs, err := monGather("http://" + addr + "/metrics")
		if err != nil {
			return err
		}
		for _, s := range telLabels(mfs["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]) {
			if s["GPU_I_ID"] != "" {
				hostname = s["Hostname"]
				return nil
			}
		}
		return errNotYet
	})
	return addr, hostname
}

var errNotYet = errors.New("no series yet")

// monGather GETs and parses a /metrics page.
func monGather(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(&buf)
}

// monEventsNode serves, over HTTP, telemetry of a simulated dgx-h100
// whose GPU 2 reported Xid 79 and whose GPU 0 runs a compute process.
func monEventsNode(t *testing.T) string {
	t.Helper()
	node := simnode.NewBuiltin("dgx-h100")
	t.Cleanup(node.Close)
	inv, err := discovery.New(node, "dgx-h100", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	if err := node.AddProcess(0, 4242, 3<<30); err != nil {
		t.Fatal(err)
	}
	s, err := telemetry.NewSampler(node, func() (gpu.Inventory, bool) { return inv, true }, telemetry.Attribution{}, telemetry.Config{
		Interval: 200 * time.Millisecond, CallTimeout: 10 * time.Second, StaleAfter: time.Minute, Hostname: "events-node",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "events-node sampler", s.Run)
	s.RecordXid(inv.GPUs[2].UUID, 79)
	reg := prometheus.NewRegistry()
	reg.MustRegister(telemetry.NewCollector(s, telemetry.CompatDCGM, "test"))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	testwait.ForErr(t, waitTimeout, "the events node's process and Xid series", func() error {
		mfs, err := monGather(srv.URL)
		if err != nil {
			return err
		}
		if mfs["gpud_process_memory_used_bytes"] == nil || mfs["gpud_xid_errors_total"] == nil {
			return errNotYet
		}
		return nil
	})
	return strings.TrimPrefix(srv.URL, "http://")
}

// monScheduler runs pkg/scheduler in-process against a real kube-apiserver
// (test/k8senv) with deploy/scheduler's example queues, a pod it binds and
// one it cannot place, and serves its /metrics: the scheduler panels' and
// alerts' source.
func monScheduler(t *testing.T) string {
	t.Helper()
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	data, err := os.ReadFile("../deploy/scheduler/examples/queues.yaml")
	if err != nil {
		t.Fatal(err)
	}
	queues, reservations, err := jobsim.ParseQueueFile(data, "queues.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(scheduler.Config{Client: env.Client, Decider: decide.New(decide.Config{}), Resync: 500 * time.Millisecond,
		Queues: queues, Reservations: reservations})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "scheduler", s.Run)
	// One node without GPUs: a pod of queue team-a that fits runs there
	// (the queue's usage), one asking more CPU than any node has waits.
	env.CreateNode(t, "cpu-node", nil)
	for name, cpu := range map[string]string{"runs": "100m", "waits": "100000"} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, Labels: map[string]string{plan.QueueLabel: "team-a"}},
			Spec: corev1.PodSpec{SchedulerName: scheduler.DefaultSchedulerName, Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}},
		}
		if _, err := env.Client.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	testwait.ForErr(t, waitTimeout, "the scheduler's bound and pending pods and queues on /metrics", func() error {
		mfs, err := monGather(srv.URL + "/metrics")
		if err != nil {
			return err
		}
		var missing []string
		for _, name := range []string{"gpud_scheduler_pending_pods", "gpud_scheduler_schedule_attempts_total", "gpud_scheduler_binds_total", "gpud_scheduler_queue_guaranteed"} {
			if mfs[name] == nil {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("no %s yet", strings.Join(missing, ", "))
		}
		return nil
	})
	return strings.TrimPrefix(srv.URL, "http://")
}

// monQuery is one dashboard query to run.
type monQuery struct {
	dashboard string
	promtest.Query
}

// monStockQueries reads testdata/dcgm-exporter-dashboard-queries.txt.
func monStockQueries(t *testing.T) []monQuery {
	t.Helper()
	f, err := os.Open("testdata/dcgm-exporter-dashboard-queries.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []monQuery
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		title, expr, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("dcgm-exporter-dashboard-queries.txt: %q: want <title>\\t<query>", line)
		}
		q := promtest.Query{Panel: title, Expr: expr}
		if strings.HasPrefix(title, "variable ") {
			if q, err = promtest.ParseLabelValues(expr); err != nil {
				t.Fatal(err)
			}
			q.Panel = title
		}
		out = append(out, monQuery{dashboard: "dcgm-exporter", Query: q})
	}
	if len(out) != 10 {
		t.Fatalf("%d stock dcgm-exporter queries, want its 10", len(out))
	}
	return out
}

// TestDashboardsOnSimulatedH100: every query of gpud's dashboard and of
// NVIDIA's stock dcgm-exporter dashboard returns series from a real
// Prometheus scraping gpud; the alerts name only metrics gpud exports.
func TestDashboardsOnSimulatedH100(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gpud binary and prometheus")
	}
	promtest.Tool(t, "prometheus")
	dir := shortDir(t)
	agent, hostname := monAgent(t, dir)
	events := monEventsNode(t)
	sched := monScheduler(t)
	prom := promtest.Start(t, filepath.Join(dir, "prometheus"), time.Second, agent, events, sched)
	prom.WaitScrapes(t, 4, "1m", waitTimeout)

	data, err := os.ReadFile("../deploy/monitoring/gpud-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	gpudQs, err := promtest.DashboardQueries(data)
	if err != nil {
		t.Fatal(err)
	}
	var qs []monQuery
	for _, q := range gpudQs {
		qs = append(qs, monQuery{dashboard: "gpud", Query: q})
	}
	qs = append(qs, monStockQueries(t)...)
	for _, q := range qs {
		t.Run(q.dashboard+"/"+q.Panel+"/"+q.RefID, func(t *testing.T) {
			vars := monDashboardVars
			if q.dashboard == "dcgm-exporter" {
				// The stock dashboard on the agent binary's node alone.
				vars = map[string]string{"Hostname": regexp.QuoteMeta(hostname), "gpu": ".*"}
			}
			expr, err := promtest.Expand(q.Expr, vars)
			if err != nil {
				t.Fatal(err)
			}
			res, err := prom.Query(t.Context(), expr)
			if err != nil {
				t.Fatal(err)
			}
			if len(res) == 0 {
				t.Fatalf("%s returns no series", expr)
			}
			if q.Label != "" && !slices.ContainsFunc(res, func(s promtest.Series) bool { return s.Metric[q.Label] != "" }) {
				t.Fatalf("label_values(%s, %s): no series has the label", expr, q.Label)
			}
		})
	}
	// The stock dashboard's two profiling panels have data on the MIG
	// instances too: dcgm-exporter users are told to use them there.
	for _, metric := range []string{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"} {
		expr := fmt.Sprintf(`%s{Hostname=%q, GPU_I_ID!="", GPU_I_PROFILE="3g.40gb"}`, metric, hostname)
		res, err := prom.Query(t.Context(), expr)
		if err != nil || len(res) != 4 {
			t.Errorf("%s: %d series (%v), want the 4 MIG instances", expr, len(res), err)
		}
	}

	t.Run("alerts name exported metrics", func(t *testing.T) {
		names := map[string]bool{}
		for _, target := range []string{agent, events, sched} {
			mfs, err := monGather("http://" + target + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			for n := range mfs {
				names[n] = true
			}
		}
		names["up"] = true // Prometheus' own, per target
		for _, ref := range monRuleMetrics(t) {
			if !names[ref.metric] {
				t.Errorf("alert %s uses %s, which gpud does not export", ref.alert, ref.metric)
			}
		}
	})
}

type monRuleRef struct{ alert, metric string }

// monMetricName finds the metric names in an alert's PromQL: gpud's
// (DCGM_FI_*, gpud_*) and Prometheus' up.
var monMetricName = regexp.MustCompile(`\b(DCGM_FI_[A-Z0-9_]+|gpud_[a-z0-9_]+|up)\b`)

// monRuleMetrics lists the metrics each alert of deploy/monitoring's
// PrometheusRule uses.
func monRuleMetrics(t *testing.T) []monRuleRef {
	t.Helper()
	data, err := os.ReadFile("../deploy/monitoring/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `yaml:"alert"`
					Expr  string `yaml:"expr"`
				} `yaml:"rules"`
			} `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	var out []monRuleRef
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			names := monMetricName.FindAllString(rule.Expr, -1)
			for _, m := range names {
				out = append(out, monRuleRef{rule.Alert, m})
			}
			if len(names) == 0 {
				t.Errorf("alert %s: no metric found in %q", rule.Alert, rule.Expr)
			}
		}
	}
	return out
}
