// Package monitoring holds gpud's Grafana dashboard and PrometheusRule. Its
// test decodes the rule strictly into the Prometheus Operator's type, runs
// `promtool check rules` and the `promtool test rules` suite in
// testdata/rules_test.yaml (every alert firing and not firing), and checks
// that every dashboard query is valid PromQL. test/monitoring_test.go runs
// the dashboard's queries against a real Prometheus scraping gpud.
package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"

	"github.com/gpud/gpud/internal/manifest"
	"github.com/gpud/gpud/test/promtest"
)

// decodeStrict decodes a YAML manifest into v strictly (internal/manifest's
// rules: case-sensitive fields, unknown and duplicate keys refused).
func decodeStrict(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := manifest.DecodeInto(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// LoadRule reads prometheusrule.yaml.
func loadRule(t *testing.T) *monitoringv1.PrometheusRule {
	t.Helper()
	var r monitoringv1.PrometheusRule
	decodeStrict(t, "prometheusrule.yaml", &r)
	if r.APIVersion != "monitoring.coreos.com/v1" || r.Kind != "PrometheusRule" {
		t.Fatalf("prometheusrule.yaml is %s %s, want monitoring.coreos.com/v1 PrometheusRule", r.APIVersion, r.Kind)
	}
	return &r
}

// writeGroups writes the rule's groups as a Prometheus rules file. With
// summaryOnly, alerts keep only their summary annotation (what the unit
// tests compare; descriptions are prose, checked by promtool check rules).
func writeGroups(t *testing.T, r *monitoringv1.PrometheusRule, path string, summaryOnly bool) {
	t.Helper()
	groups := slices.Clone(r.Spec.Groups)
	for i := range groups {
		groups[i].Rules = slices.Clone(groups[i].Rules)
		for j := range groups[i].Rules {
			rule := &groups[i].Rules[j]
			if summaryOnly && rule.Alert != "" {
				rule.Annotations = map[string]string{"summary": rule.Annotations["summary"]}
			}
		}
	}
	js, err := json.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, js, 0o644); err != nil { // YAML is a superset of JSON
		t.Fatal(err)
	}
}

func alerts(r *monitoringv1.PrometheusRule) []monitoringv1.Rule {
	var out []monitoringv1.Rule
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Alert != "" {
				out = append(out, rule)
			}
		}
	}
	return out
}

func TestPrometheusRule(t *testing.T) {
	r := loadRule(t)
	as := alerts(r)
	if len(as) == 0 {
		t.Fatal("no alerts in prometheusrule.yaml")
	}
	for _, a := range as {
		sev := a.Labels["severity"]
		if sev != "critical" && sev != "warning" {
			t.Errorf("alert %s: severity %q, want critical or warning", a.Alert, sev)
		}
		if a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
			t.Errorf("alert %s: needs a summary and a description saying what to do", a.Alert)
		}
	}
	// The failures the issue names each have an alert.
	for _, want := range []string{"GPUCriticalXid", "GPULost", "GPUDoubleBitECCError", "GPURowRemapFailure", "GPURowRemapPending",
		"GPUHighTemperature", "GPUUnhealthy", "GPUDAgentDown", "GPUDSamplerDown", "GPUSharingMemoryOverLimit", "GPUMIGModeChangePending"} {
		if !slices.ContainsFunc(as, func(a monitoringv1.Rule) bool { return a.Alert == want }) {
			t.Errorf("no alert %s", want)
		}
	}
	dir := t.TempDir()
	full := filepath.Join(dir, "full.yaml")
	writeGroups(t, r, full, false)
	if _, err := promtest.Promtool(t, "check", "rules", full); err != nil {
		t.Fatal(err)
	}
}

// TestPrometheusRuleUnitTests runs testdata/rules_test.yaml with promtool,
// after checking that it has, for every alert, a case where it fires and
// one where it stays quiet.
func TestPrometheusRuleUnitTests(t *testing.T) {
	r := loadRule(t)
	var suite struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	data, err := os.ReadFile("testdata/rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &suite); err != nil {
		t.Fatalf("testdata/rules_test.yaml: %v", err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range suite.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, a := range alerts(r) {
		if !fires[a.Alert] || !quiet[a.Alert] {
			t.Errorf("alert %s: testdata/rules_test.yaml needs a case where it fires (has one: %v) and one where it does not (has one: %v)",
				a.Alert, fires[a.Alert], quiet[a.Alert])
		}
	}
	dir := t.TempDir()
	writeGroups(t, r, filepath.Join(dir, "rules.yaml"), true)
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := promtest.Promtool(t, "test", "rules", filepath.Join(dir, "rules_test.yaml")); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules: no SUCCESS in\n%s", out)
	}
}

// dashboardVars are the values the dashboard's variables take when a user
// picks All.
var dashboardVars = map[string]string{"datasource": "prometheus", "Hostname": ".*", "gpu": ".*"}

// TestDashboard: the dashboard is valid JSON with unique panel ids, every
// panel queries the selectable data source, and every query is valid
// PromQL (promtool check rules on one recording rule per query).
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile("gpud-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID         int             `json:"id"`
			Type       string          `json:"type"`
			Title      string          `json:"title"`
			Datasource json.RawMessage `json:"datasource"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("gpud-dashboard.json: %v", err)
	}
	if d.UID == "" {
		t.Error("the dashboard needs a fixed uid so links to it survive a reinstall")
	}
	ids := map[int]string{}
	for _, p := range d.Panels {
		if prev, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type != "row" && !strings.Contains(string(p.Datasource), "${datasource}") {
			t.Errorf("panel %q: datasource %s, want the ${datasource} variable", p.Title, p.Datasource)
		}
	}
	qs, err := promtest.DashboardQueries(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 20 {
		t.Fatalf("%d queries in the dashboard, want its panels' (at least 20)", len(qs))
	}
	var rules []map[string]string
	for i, q := range qs {
		expr, err := promtest.Expand(q.Expr, dashboardVars)
		if err != nil {
			t.Errorf("panel %q: %v", q.Panel, err)
			continue
		}
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query_%d", i), "expr": expr})
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	js, _ := json.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err := os.WriteFile(path, js, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := promtest.Promtool(t, "check", "rules", path); err != nil {
		t.Fatalf("a dashboard query is not valid PromQL: %v", err)
	}
}
