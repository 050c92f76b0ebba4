package promtest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Query is one PromQL query of a Grafana dashboard: a panel target's expr
// or a query variable's label_values().
type Query struct {
	Panel string // the panel's title, or "variable <name>"
	RefID string // the target's refId; empty for variables
	Expr  string // as written in the dashboard
	// Label is set for label_values(expr, label): the query must return
	// series carrying it.
	Label string
}

// dashPanel is the part of a Grafana panel this reads; rows nest panels.
type dashPanel struct {
	Title   string      `json:"title"`
	Targets []dashQuery `json:"targets"`
	Panels  []dashPanel `json:"panels"`
}

type dashQuery struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

// DashboardQueries returns every query of a Grafana dashboard JSON: each
// panel target's expr (rows' nested panels included) and each query
// variable's label_values(...).
func DashboardQueries(data []byte) ([]Query, error) {
	var d struct {
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	var out []Query
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, Query{Panel: p.Title, RefID: tg.RefID, Expr: tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		// The query is a string in old dashboards, {query, refId} in new ones.
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("dashboard variable %s: query: %w", v.Name, err)
			}
			q = obj.Query
		}
		lq, err := ParseLabelValues(q)
		if err != nil {
			return nil, fmt.Errorf("dashboard variable %s: %w", v.Name, err)
		}
		lq.Panel = "variable " + v.Name
		out = append(out, lq)
	}
	return out, nil
}

var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.*?)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// ParseLabelValues reads Grafana's label_values(expr, label) variable
// query (the only kind gpud's and dcgm-exporter's dashboards use).
func ParseLabelValues(q string) (Query, error) {
	m := labelValues.FindStringSubmatch(q)
	if m == nil {
		return Query{}, fmt.Errorf("variable query %q: want label_values(<selector>, <label>)", q)
	}
	return Query{Expr: m[1], Label: m[2]}, nil
}

// grafanaVars matches $name, ${name}, ${name:format} and [[name]].
var grafanaVars = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)\]\]`)

// Expand replaces Grafana's variables in expr: the dashboard's own from
// vars (a multi-value variable set to All is a regexp, ".*"), and
// Grafana's built-in $__rate_interval, $__interval and $__range. A
// variable in neither is an error, so a query is never sent half-expanded.
func Expand(expr string, vars map[string]string) (string, error) {
	builtin := map[string]string{"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}
	var missing []string
	out := grafanaVars.ReplaceAllStringFunc(expr, func(s string) string {
		m := grafanaVars.FindStringSubmatch(s)
		name := m[1] + m[2] + m[3]
		if v, ok := vars[name]; ok {
			return v
		}
		if v, ok := builtin[name]; ok {
			return v
		}
		missing = append(missing, name)
		return s
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("query %q: unknown Grafana variables %s", expr, strings.Join(missing, ", "))
	}
	return out, nil
}
