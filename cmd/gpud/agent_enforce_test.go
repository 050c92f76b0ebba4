package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpud/gpud/pkg/agenthttp"
	"github.com/gpud/gpud/pkg/agentsrc"
	"github.com/gpud/gpud/pkg/enforce/enforceagent"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/memlimit"
	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/procattr"
	"github.com/gpud/gpud/pkg/simnode"
)

func TestEnforceFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // "" = valid
	}{
		{name: "defaults"},
		{name: "align", args: []string{"--cpu-affinity", "align"}},
		{name: "bad mode", args: []string{"--cpu-affinity", "numa"}, want: "--cpu-affinity: \"numa\": want align or off"},
		{name: "interval too slow", args: []string{"--enforce-interval", "2s"}, want: "--enforce-interval: 2s: want more than 0 and at most 1s"},
		{name: "interval zero", args: []string{"--enforce-interval", "0s"}, want: "--enforce-interval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs, c := agentFlagSet(io.Discard)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			errs := c.enforce.validate()
			if tc.want == "" {
				if len(errs) > 0 {
					t.Fatalf("validate() = %v, want none", errs)
				}
				return
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("validate() = %v, want %q", errs, tc.want)
			}
		})
	}
	_, c := agentFlagSet(io.Discard)
	if !c.enforce.IsolateDevices || c.enforce.CPUAffinity != enforceagent.CPUAffinityOff {
		t.Errorf("defaults: isolate-devices %v cpu-affinity %s, want true and off", c.enforce.IsolateDevices, c.enforce.CPUAffinity)
	}
}

func enforceTestConfig(t *testing.T, args ...string) (*agentConfig, *agentsrc.Sources) {
	t.Helper()
	dir := t.TempDir()
	fs, c := agentFlagSet(io.Discard)
	if err := fs.Parse(append([]string{"--proc-root", filepath.Join(dir, "proc"), "--sysfs-root", filepath.Join(dir, "sys")}, args...)); err != nil {
		t.Fatal(err)
	}
	src := &agentsrc.Sources{Pods: podresources.New(filepath.Join(dir, "kubelet.sock")), PodNames: procattr.PodLogs{Root: filepath.Join(dir, "pods")}}
	return c, src
}

func noInventory() gpu.Inventory { return gpu.Inventory{} }

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestNewEnforceTaskWithoutCgroups(t *testing.T) {
	c, src := enforceTestConfig(t)
	tasks, status, err := newEnforceTasks(c, src, nil, nil, noInventory, nil, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if tasks != nil || status == nil || !strings.Contains(status(), "not available") {
		t.Fatalf("no mountinfo: tasks %v, status %v; want no task and a not-available status", tasks, status)
	}
	c, src = enforceTestConfig(t, "--cpu-affinity", "align")
	if _, _, err := newEnforceTasks(c, src, nil, nil, noInventory, nil, quietLog()); err == nil || !strings.Contains(err.Error(), "--cpu-affinity align") {
		t.Fatalf("align without cgroups: %v, want an error naming --cpu-affinity", err)
	}
}

// TestNewEnforceTaskSimulatedHost: a simulated node with the host's /proc
// (as `make run` starts it) enforces nothing on the host's containers, and
// says so; --cpu-affinity align is refused naming the flag.
func TestNewEnforceTaskSimulatedHost(t *testing.T) {
	c, src := enforceTestConfig(t, "--simulate", "dgx-h100", "--proc-root", "/proc/")
	tasks, status, err := newEnforceTasks(c, src, nil, nil, noInventory, nil, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if tasks != nil || status == nil || !strings.Contains(status(), "simulated node without --sim-dev-root") {
		t.Fatalf("simulated on the host's /proc: tasks %v, status %v; want no task and a status saying why", tasks, status)
	}
	// With its own device files, the simulated node is this node's GPUs
	// (a kubelet's containers get them): isolation is not switched off.
	c, src = enforceTestConfig(t, "--simulate", "dgx-h100", "--proc-root", "/proc", "--sim-dev-root", t.TempDir())
	_, status, err = newEnforceTasks(c, src, nil, nil, noInventory, nil, quietLog())
	if err == nil && status != nil && strings.Contains(status(), "simulated node") {
		t.Fatalf("simulated with --sim-dev-root: status %q, want isolation tried", status())
	}
	c, src = enforceTestConfig(t, "--simulate", "dgx-h100", "--proc-root", "/proc", "--cpu-affinity", "align")
	if _, _, err := newEnforceTasks(c, src, nil, nil, noInventory, nil, quietLog()); err == nil || !strings.Contains(err.Error(), "cpu-affinity") {
		t.Fatalf("align, simulated on the host's /proc: %v, want an error naming --cpu-affinity", err)
	}
}

func TestNewEnforceTaskOff(t *testing.T) {
	c, src := enforceTestConfig(t, "--isolate-devices=false")
	tasks, status, err := newEnforceTasks(c, src, nil, nil, noInventory, nil, quietLog())
	if err != nil || tasks != nil || status != nil {
		t.Fatalf("all off: %v %v %v, want nothing", tasks, status, err)
	}
}

// TestNewEnforceTaskDRA: in DRA mode isolation is on, built on the same
// mounts, and its status says it follows claims' devices.
func TestNewEnforceTaskDRA(t *testing.T) {
	c, src := enforceTestConfig(t, "--kubelet-api", "dra", "--nri-socket", "")
	cg := t.TempDir()
	writeTestFiles(t, map[string]string{
		filepath.Join(c.procRoot, "self", "mountinfo"): "41 31 0:38 / " + cg + " rw,relatime - cgroup2 cgroup2 rw\n",
		filepath.Join(c.procRoot, "devices"):           "Character devices:\n195 nvidia\n",
	})
	tasks, status, err := newEnforceTasks(c, src, nil, nil, noInventory, nil, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 1 || tasks[0].Name != "enforce" {
		t.Fatalf("tasks = %v, want enforce", tasks)
	}
	if s := status(); !strings.Contains(s, "ebpf on "+cg+" (DRA claims' devices)") && !strings.Contains(s, "not available") {
		t.Errorf("status = %q, want ebpf on %s for DRA claims' devices, or why not", s, cg)
	}
}

func writeTestFiles(t *testing.T, files map[string]string) {
	t.Helper()
	for p, content := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNewEnforceTaskMounts points mountinfo at a temp cgroup2 "mount":
// the task is built on it, and /readyz shows its status.
func TestNewEnforceTaskMounts(t *testing.T) {
	c, src := enforceTestConfig(t)
	cg := t.TempDir()
	if err := os.MkdirAll(filepath.Join(c.procRoot, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	mi := "41 31 0:38 / " + cg + " rw,relatime - cgroup2 cgroup2 rw\n"
	if err := os.WriteFile(filepath.Join(c.procRoot, "self", "mountinfo"), []byte(mi), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.procRoot, "devices"), []byte("Character devices:\n195 nvidia\n508 nvidia-caps\n510 nvidia-uvm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tasks, status, err := newEnforceTasks(c, src, nil, nil, noInventory, nil, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 2 || tasks[0].Name != "enforce" || tasks[1].Name != "nri" {
		t.Fatalf("tasks = %v, want enforce and nri", tasks)
	}
	s := status()
	if !strings.Contains(s, "ebpf on "+cg) && !strings.Contains(s, "not available") {
		t.Errorf("status = %q, want ebpf on %s or why not", s, cg)
	}
	srv := &agenthttp.Server{Inventory: func() (gpu.Inventory, bool) { return gpu.Inventory{}, true }, Metrics: prometheus.NewRegistry(), Enforcement: status, Log: quietLog()}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "ok\n"+s+"\n" {
		t.Errorf("/readyz = %d %q, want ok and the enforcement line", rec.Code, rec.Body.String())
	}
}

// TestNewEnforceTaskMemoryLimits: the enforcer is built with GPU memory
// limits on the node's GPUs: each GPU's mode and why is in the /readyz
// status and in gpud_memory_limit_mode, r615 GPUs in driver mode on a
// cgroup2 node, older drivers' in MPS mode (--mps, the default).
func TestNewEnforceTaskMemoryLimits(t *testing.T) {
	tests := []struct {
		name, driver, want string
	}{
		{name: "r615", driver: "615.40.01", want: "memory limits: driver on GPUs 0,1,2,3,4,5,6,7 (driver 615.40.01 limits GPU memory per cgroup)"},
		{name: "r550", driver: "550.54.15", want: "memory limits: mps on GPUs 0,1,2,3,4,5,6,7 (no driver memory limits (driver 550.54.15 predates r615); MPS pinned-memory limits)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, src := enforceTestConfig(t, "--nri-socket", "")
			cg := t.TempDir()
			writeTestFiles(t, map[string]string{
				filepath.Join(c.procRoot, "self", "mountinfo"): "41 31 0:38 / " + cg + " rw,relatime - cgroup2 cgroup2 rw\n",
				filepath.Join(c.procRoot, "devices"):           "Character devices:\n195 nvidia\n",
			})
			n := simnode.NewBuiltin("dgx-h100", simnode.WithDriverVersion(tc.driver))
			t.Cleanup(n.Close)
			reg := prometheus.NewRegistry()
			tasks, status, err := newEnforceTasks(c, src, n, reg, noInventory, nil, quietLog())
			if err != nil {
				t.Fatal(err)
			}
			if len(tasks) != 1 || status == nil {
				t.Fatalf("tasks %v, status %v; want the enforce task and a status", tasks, status)
			}
			if s := status(); !strings.Contains(s, "\n"+tc.want) {
				t.Errorf("status = %q, want a line %q", s, tc.want)
			}
			if got := testutil.CollectAndCount(reg, "gpud_memory_limit_mode"); got != 8*len(memlimit.Modes) {
				t.Errorf("gpud_memory_limit_mode: %d series, want %d", got, 8*len(memlimit.Modes))
			}
			if got := testutil.CollectAndCount(reg, "gpud_memory_limit_sets_total", "gpud_memory_limit_unset_containers"); got != 3 {
				t.Errorf("memory limit set metrics: %d series, want 3", got)
			}
		})
	}
}
