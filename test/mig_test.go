package test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/deviceplugin"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/test/kubeletstub"
)

const h100Layouts = `version: v1
mig-configs:
  all-1g:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  mixed:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.10gb": 3, "4g.40gb": 1}
`

// applyLayout plans and applies a layout on the rig's node, then
// rediscovers as the agent's mig component does after an apply.
func applyLayout(t *testing.T, r *rig, name string) mig.Result {
	t.Helper()
	f, err := mig.ParseLayoutFile([]byte(h100Layouts))
	if err != nil {
		t.Fatal(err)
	}
	st, err := mig.ReadState(r.node)
	if err != nil {
		t.Fatal(err)
	}
	want, err := f.Resolve(name, st)
	if err != nil {
		t.Fatal(err)
	}
	p, err := mig.NewPlan(st, want, nil, mig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := mig.NewApplier(r.node, nil).Apply(t.Context(), st, want, p)
	if err != nil {
		t.Fatal(err)
	}
	r.rediscover(t)
	return res
}

// TestMIGApplyReadvertised: after each apply the fake kubelet sees the new
// resources, the gone ones emptied, and the kept slices keep their IDs,
// with no plugin restart.
func TestMIGApplyReadvertised(t *testing.T) {
	r := startRig(t, "dgx-h100", true, func(c *deviceplugin.Config) { c.MIGStrategy = deviceplugin.MIGMixed })
	whole := watch(t, r.client(t, gpuRes, 1))
	if _, err := whole.WaitFor(ctxT(t), kubeletstub.Count(8, pluginapi.Healthy)); err != nil {
		t.Fatal(err)
	}

	applyLayout(t, r, "all-1g")
	small := watch(t, r.client(t, "nvidia.com/mig-1g.10gb", 1))
	before, err := small.WaitFor(ctxT(t), kubeletstub.Count(7, pluginapi.Healthy))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := whole.WaitFor(ctxT(t), kubeletstub.Count(7, pluginapi.Healthy)); err != nil {
		t.Fatalf("whole GPUs after MIG on GPU 0: %v", err)
	}

	res := applyLayout(t, r, "mixed")
	if len(res.Plan.GPUs) != 1 || len(res.Plan.GPUs[0].Keep) != 3 {
		t.Fatalf("plan %+v, want GPU 0 changed keeping 3 slices", res.Plan.GPUs)
	}
	after, err := small.WaitFor(ctxT(t), kubeletstub.Count(3, pluginapi.Healthy))
	if err != nil {
		t.Fatalf("1g.10gb after mixed: %v", err)
	}
	for _, id := range kubeletstub.IDs(after) {
		if !slices.Contains(kubeletstub.IDs(before), id) {
			t.Errorf("slice %s is new; the kept 1g.10gb slices should keep their IDs", id)
		}
	}
	big := watch(t, r.client(t, "nvidia.com/mig-4g.40gb", 1))
	if _, err := big.WaitFor(ctxT(t), kubeletstub.Count(1, pluginapi.Healthy)); err != nil {
		t.Fatalf("new resource 4g.40gb: %v", err)
	}
}

// TestAgentMIGThroughAdminAPIAndConfigFile runs `gpud agent` on a simulated
// dgx-a100: it applies the layout named in its config file at start, again
// when that file changes, and `gpud mig plan|apply` go through its admin
// socket.
func TestAgentMIGThroughAdminAPIAndConfigFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gpud binary")
	}
	bin := buildGpud(t)
	dir := shortDir(t)
	layouts := filepath.Join(dir, "layouts.yaml")
	data, err := os.ReadFile("../deploy/examples/mig-layouts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(layouts, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath, sock := filepath.Join(dir, "agent.yaml"), filepath.Join(dir, "admin.sock")
	writeCfg := func(layout string) {
		cfg := "mig-config-file: " + layouts + "\nmig-config: " + layout + "\n"
		if err := os.WriteFile(cfgPath+".tmp", []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(cfgPath+".tmp", cfgPath); err != nil { // as editors and ConfigMaps do
			t.Fatal(err)
		}
	}
	writeCfg("all-1g.5gb")
	startAgent(t, bin, dir, "--config", cfgPath, "--simulate", "dgx-a100",
		"--sim-state-file", filepath.Join(dir, "state.json"), "--admin-socket", sock, "--http-addr", "",
		"--device-plugin-dir", "", "--mig-reset-gpus", "--enforce-memory", "off")
	c := adminapi.NewClient(sock, 30*time.Second)
	waitLayout := func(what string, ok func(mig.State) bool) {
		t.Helper()
		testwait.ForErr(t, waitTimeout, what, func() error {
			var st mig.State
			if err := c.Call(t.Context(), "GET", "/v1/mig/state", nil, &st); err != nil {
				return err
			}
			if !ok(st) {
				return fmt.Errorf("state %v", st.GPUs)
			}
			return nil
		})
	}
	profiles := func(g mig.GPUState) []string {
		var out []string
		for _, in := range g.Instances {
			out = append(out, in.String())
		}
		return out
	}
	waitLayout("all-1g.5gb from the config file at start", func(st mig.State) bool {
		for _, g := range st.GPUs {
			if len(g.Instances) != 7 {
				return false
			}
		}
		return true
	})

	// The CLI plans through the agent: the shared slices are kept.
	out, err := gpud(t, bin, dir, "mig", "plan", "--admin-socket", sock, "-f", layouts, "-c", "mixed")
	if err != nil {
		t.Fatalf("gpud mig plan: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "(agent)") || strings.Count(string(out), "keep 1g.5gb@0-0, 1g.5gb@1-1") != 4 {
		t.Errorf("plan via the agent:\n%s\nwant 4 GPUs keeping 1g.5gb@0 and @1", out)
	}
	// A layout with an unknown profile is refused naming it.
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: v1\nmig-configs:\n  x:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"1g.7gb\": 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = gpud(t, bin, dir, "mig", "apply", "--admin-socket", sock, "-f", bad, "-c", "x")
	if err == nil || !strings.Contains(string(out), `"1g.7gb"`) {
		t.Errorf("apply of an unknown profile: err %v, output %s; want an error naming 1g.7gb", err, out)
	}

	// Editing the agent config applies the newly named layout.
	writeCfg("mixed")
	waitLayout("mixed after the config file changed", func(st mig.State) bool {
		return slices.Equal(profiles(st.GPUs[0]), []string{"1g.5gb@0", "1g.5gb@1", "2g.10gb@2", "3g.20gb@4"}) && !st.GPUs[7].MIGEnabled
	})

	// Apply through the admin API with the CLI.
	out, err = gpud(t, bin, dir, "mig", "apply", "--admin-socket", sock, "-f", layouts, "-c", "all-3g.20gb")
	if err != nil {
		t.Fatalf("gpud mig apply: %v\n%s", err, out)
	}
	waitLayout("all-3g.20gb applied through the admin socket", func(st mig.State) bool {
		return slices.Equal(profiles(st.GPUs[0]), []string{"3g.20gb@0", "3g.20gb@4"}) && slices.Equal(profiles(st.GPUs[7]), []string{"3g.20gb@0", "3g.20gb@4"})
	})
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin socket mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	var apiErr *adminapi.Error
	err = c.Call(t.Context(), "POST", "/v1/mig/apply", map[string]any{"layouts": "version: v2", "config": "x"}, nil)
	if !errors.As(err, &apiErr) || apiErr.Code != "bad_layout" {
		t.Errorf("bad layout over the API: %v, want a bad_layout error", err)
	}

	// Sharing changes at run time through the same API.
	sharing := map[string]any{"devices": map[string]any{"0": map[string]any{"replicas": 4}}}
	var changed map[string]bool
	if err := c.Call(t.Context(), "PUT", "/v1/sharing", sharing, &changed); err != nil || !changed["changed"] {
		t.Fatalf("PUT /v1/sharing = %v, %v; want changed", changed, err)
	}
	var got struct {
		Devices map[string]struct{ Replicas int } `json:"devices"`
	}
	if err := c.Call(t.Context(), "GET", "/v1/sharing", nil, &got); err != nil || got.Devices["0"].Replicas != 4 {
		t.Errorf("GET /v1/sharing = %+v, %v; want gpu 0 with 4 replicas", got, err)
	}
	err = c.Call(t.Context(), "PUT", "/v1/sharing", map[string]any{"devices": map[string]any{"0": map[string]any{"replicas": 1}}}, nil)
	if !errors.As(err, &apiErr) || apiErr.Code != "invalid" || !strings.Contains(apiErr.Message, "replicas 1") {
		t.Errorf("invalid sharing over the API: %v, want an invalid error naming replicas 1", err)
	}
}
