package test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/test/kubeletstub"
)

// TestSharingChangeReadvertised runs `gpud agent` with a fake kubelet: a
// sharing change sent to the admin API shows up in the kubelet's device
// lists without restarting the agent.
func TestSharingChangeReadvertised(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gpud binary")
	}
	bin := buildGpud(t)
	dir := shortDir(t)
	kubelet, err := kubeletstub.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	sock := filepath.Join(dir, "admin.sock")
	startAgent(t, bin, dir, "--simulate", "dgx-h100", "--http-addr", "",
		"--device-plugin-dir", dir, "--admin-socket", sock, "--enforce-memory", "off")

	dial := func(resource string) *kubeletstub.Watch {
		t.Helper()
		reg, err := kubelet.WaitRegistered(ctxT(t), resource, 1)
		if err != nil {
			t.Fatalf("%s never registered: %v", resource, err)
		}
		c, err := kubeletstub.Dial(ctxT(t), dir, reg.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return watch(t, c)
	}
	whole := dial("nvidia.com/gpu")
	if _, err := whole.WaitFor(ctxT(t), kubeletstub.Count(8, pluginapi.Healthy)); err != nil {
		t.Fatalf("8 whole GPUs before sharing: %v", err)
	}

	c := adminapi.NewClient(sock, 30*time.Second)
	// The admin socket may not be up yet: retry until the agent answers.
	var changed map[string]bool
	testwait.ForErr(t, waitTimeout, "PUT /v1/sharing to succeed", func() error {
		return c.Call(t.Context(), "PUT", "/v1/sharing", map[string]any{"devices": map[string]any{"0": map[string]any{"replicas": 4, "limitMemory": true}}}, &changed)
	})
	if !changed["changed"] {
		t.Fatalf("PUT /v1/sharing = %v, want changed", changed)
	}
	shared := dial("nvidia.com/gpu.shared")
	devs, err := shared.WaitFor(ctxT(t), kubeletstub.Count(4, pluginapi.Healthy))
	if err != nil {
		t.Fatalf("4 replicas after the sharing change: %v", err)
	}
	for _, d := range devs {
		if !strings.Contains(d.ID, "::") {
			t.Errorf("replica ID %q is not <uuid>::<n>", d.ID)
		}
	}
	if _, err := whole.WaitFor(ctxT(t), kubeletstub.Count(7, pluginapi.Healthy)); err != nil {
		t.Fatalf("whole GPUs did not drop to 7: %v", err)
	}
}
