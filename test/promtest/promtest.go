// Package promtest runs Debian's Prometheus tools for tests: promtool
// (check rules, test rules) and a real Prometheus server that scrapes
// gpud and answers PromQL queries over its HTTP API. It also reads the
// PromQL out of Grafana dashboards. It is imported only by _test.go files;
// everything it writes goes under the dir the test gives it.
package promtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/internal/testkit/promtooltest"
)

// Tool returns the path of a Prometheus binary (promtool, prometheus). Not
// on PATH, the test is skipped, or fails when $GPUD_REQUIRE_PROMTOOL is 1
// (CI installs Debian's prometheus package, which has both).
func Tool(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(promtooltest.EnvRequire) == "1" {
			t.Fatalf("%s not on PATH but %s=1: install Debian's prometheus package (%v)", name, promtooltest.EnvRequire, err)
		}
		t.Skipf("%s not on PATH (apt-get install prometheus; %s=1 makes this a failure)", name, promtooltest.EnvRequire)
	}
	return path
}

// Promtool runs `promtool args...` and returns its combined output; a
// non-zero exit is the error, with the output in it.
func Promtool(t testing.TB, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(Tool(t, "promtool"), args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("promtool %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Server is a real Prometheus scraping the targets it was started with.
type Server struct {
	URL string // http://127.0.0.1:port
}

// Start runs prometheus with its config and TSDB under dir, scraping
// targets (host:port, path /metrics) every interval, until the test ends.
// It returns once the server answers queries.
func Start(t testing.TB, dir string, interval time.Duration, targets ...string) *Server {
	t.Helper()
	bin := Tool(t, "prometheus")
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{
		"global": map[string]any{"scrape_interval": interval.String(), "scrape_timeout": interval.String(), "evaluation_interval": interval.String()},
		"scrape_configs": []any{map[string]any{
			"job_name": "gpud", "honor_labels": true,
			"static_configs": []any{map[string]any{"targets": targets}},
		}},
	}
	data, _ := json.Marshal(cfg) // YAML is a superset of JSON
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr, "--log.level=warn")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})
	s := &Server{URL: "http://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus at %s not ready after 30s: %v\n%s", addr, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Series is one element of an instant query's result.
type Series struct {
	Metric map[string]string
	Value  string
}

// Query runs an instant query at the server's now.
func (s *Server) Query(ctx context.Context, expr string) ([]Series, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/api/v1/query",
		strings.NewReader(url.Values{"query": {expr}}.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string            `json:"resultType"`
			Result     []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("query %q: %w: %s", expr, err, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", expr, r.Error)
	}
	var out []Series
	switch r.Data.ResultType {
	case "vector":
		for _, raw := range r.Data.Result {
			var e struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				return nil, err
			}
			out = append(out, Series{Metric: e.Metric, Value: fmt.Sprint(e.Value[1])})
		}
	case "scalar":
		var v [2]any
		if len(r.Data.Result) == 2 {
			_ = json.Unmarshal(bytes.Join([][]byte{[]byte("["), r.Data.Result[0], []byte(","), r.Data.Result[1], []byte("]")}, nil), &v)
		}
		out = append(out, Series{Value: fmt.Sprint(v[1])})
	default:
		return nil, fmt.Errorf("query %q: result type %s, want a vector", expr, r.Data.ResultType)
	}
	return out, nil
}

// WaitScrapes waits until every target has been scraped at least n times
// (so rate() over the window has samples) and is up.
func (s *Server) WaitScrapes(t testing.TB, n int, window string, timeout time.Duration) {
	t.Helper()
	expr := fmt.Sprintf("min(count_over_time(up[%s])) >= %d and min(up) == 1", window, n)
	deadline := time.Now().Add(timeout)
	for {
		res, err := s.Query(t.Context(), expr)
		if err == nil && len(res) > 0 {
			return
		}
		if time.Now().After(deadline) {
			targets, _ := s.Query(t.Context(), "up")
			t.Fatalf("prometheus did not scrape every target %d times within %v (up: %v, err: %v)", n, timeout, targets, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", errors.Join(errors.New("no free port for prometheus"), err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
