package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/mps"
	"github.com/gpud/gpud/pkg/mps/mpstest"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/test/kubeletstub"
)

// buildFakeMPS builds the stand-in nvidia-cuda-mps-control
// (pkg/mps/testdata/fakemps) into a driver root under dir.
func buildFakeMPS(t *testing.T, dir string) string {
	t.Helper()
	root := filepath.Join(dir, "driver")
	if err := mpstest.Build(filepath.Join(root, mps.ControlBinary)); err != nil {
		t.Fatal(err)
	}
	return root
}

// computeModes reads the compute modes a simulated node keeps in its state
// file, by GPU UUID.
func computeModes(stateFile string) (map[string]nvml.ComputeMode, error) {
	b, err := os.ReadFile(stateFile)
	if err != nil {
		return nil, err
	}
	var st struct {
		GPUs []struct {
			UUID        string `json:"uuid"`
			ComputeMode int    `json:"computeMode"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, err
	}
	out := map[string]nvml.ComputeMode{}
	for _, g := range st.GPUs {
		out[g.UUID] = nvml.ComputeMode(g.ComputeMode)
	}
	return out, nil
}

func wantMode(stateFile, uuid string, want nvml.ComputeMode) error {
	modes, err := computeModes(stateFile)
	if err != nil {
		return err
	}
	if modes[uuid] != want {
		return fmt.Errorf("gpu %s compute mode %d, want %d", uuid, modes[uuid], want)
	}
	return nil
}

// TestMPSAgentEnforcesLimits runs `gpud agent --simulate dgx-h100` with GPU
// 0 shared in 4 memory-limited replicas and the stand-in MPS control
// program as the driver's: GPU 0's daemon runs and its compute mode
// becomes EXCLUSIVE_PROCESS; an Allocate answer mounts the daemon's pipe
// directory and carries the limits; a simulated CUDA process with that
// environment, reaching the agent's daemon, fails an allocation above its
// pinned limit; once sharing is removed the daemon quits and GPU 0's mode
// is DEFAULT again.
func TestMPSAgentEnforcesLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gpud binary")
	}
	bin := buildGpud(t)
	dir := shortDir(t)
	driver := buildFakeMPS(t, dir)
	mpsRoot := filepath.Join(dir, "mps")
	state := filepath.Join(dir, "sim-state.json")
	cdiDir := filepath.Join(dir, "cdi")
	sharing := filepath.Join(dir, "sharing.yaml")
	if err := os.WriteFile(sharing, []byte("devices:\n  \"0\": {replicas: 4, limitMemory: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kubelet, err := kubeletstub.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	admin := filepath.Join(dir, "admin.sock")
	startAgent(t, bin, dir, "--simulate", "dgx-h100", "--http-addr", "", "--device-plugin-dir", dir, "--cdi-dir", cdiDir,
		"--admin-socket", admin, "--enforce-memory", "off", "--sharing-config", sharing,
		"--driver-root", driver, "--mps-root", mpsRoot, "--sim-state-file", state)
	t.Cleanup(func() { killDaemons(mpsRoot) })

	inv, err := discovery.New(simnode.NewBuiltin("dgx-h100"), "n", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	gpu0, gpu1 := inv.GPUs[0], inv.GPUs[1]
	pipe := mps.PipeDir(mpsRoot, gpu0.UUID)
	testwait.ForErr(t, waitTimeout, "gpu 0's MPS daemon", func() error {
		c, err := net.Dial("unix", filepath.Join(pipe, "control"))
		if err != nil {
			return err
		}
		return c.Close()
	})
	testwait.ForErr(t, waitTimeout, "gpu 0 EXCLUSIVE_PROCESS", func() error {
		return wantMode(state, gpu0.UUID, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS)
	})
	if err := wantMode(state, gpu1.UUID, nvml.COMPUTEMODE_DEFAULT); err != nil {
		t.Errorf("unshared gpu 1: %v", err)
	}

	reg, err := kubelet.WaitRegistered(ctxT(t), "nvidia.com/gpu.shared", 1)
	if err != nil {
		t.Fatalf("gpu.shared never registered: %v", err)
	}
	c, err := kubeletstub.Dial(ctxT(t), dir, reg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	devs, err := watch(t, c).WaitFor(ctxT(t), kubeletstub.Count(4, pluginapi.Healthy))
	if err != nil {
		t.Fatalf("4 replicas: %v", err)
	}
	resp, err := c.AllocateIDs(ctxT(t), []string{devs[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.ContainerResponses[0]
	quarterMiB := gpu0.MemoryBytes >> 20 / 4
	wantEnv := map[string]string{
		"CUDA_MPS_PIPE_DIRECTORY":           mps.ContainerPipeDir,
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  fmt.Sprintf("0=%dM", quarterMiB),
	}
	for k, v := range wantEnv {
		if r.Envs[k] != v {
			t.Errorf("Allocate env %s = %q, want %q", k, r.Envs[k], v)
		}
	}
	if len(r.Mounts) != 2 || r.Mounts[0].HostPath != pipe || r.Mounts[0].ContainerPath != mps.ContainerPipeDir ||
		r.Mounts[1].HostPath != mps.ShmDir(mpsRoot) || r.Mounts[1].ContainerPath != "/dev/shm" {
		t.Fatalf("Allocate mounts = %v, want %s at %s and the daemons' shm at /dev/shm", r.Mounts, pipe, mps.ContainerPipeDir)
	}
	spec, err := os.ReadFile(filepath.Join(cdiDir, "gpud-nvidia.com-gpu.json"))
	if err != nil || !strings.Contains(string(spec), pipe) {
		t.Errorf("CDI spec does not mount %s: %v\n%s", pipe, err, spec)
	}

	// A CUDA process in that container: the mount makes the container's
	// pipe directory the host's, where the agent's daemon answers.
	env := map[string]string{}
	for k, v := range r.Envs {
		env[k] = v
	}
	env[simnode.EnvMPSPipeDirectory] = r.Mounts[0].HostPath
	proc := simnode.NewBuiltin("dgx-h100")
	d0, _ := proc.DeviceGetHandleByIndex(0)
	if ret := d0.SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	limit := quarterMiB << 20
	if err := proc.StartProcess(0, simnode.ProcessSpec{PID: 100, MemoryBytes: limit - 1<<20, Env: env}); err != nil {
		t.Fatalf("a client within its limit: %v", err)
	}
	if l, _ := proc.Limits(100); !l.MPS || l.PinnedMemoryBytes != limit || l.ActiveThreadPercent != 25 {
		t.Errorf("client limits = %+v, want an MPS client with %d bytes and 25%%", l, limit)
	}
	if err := proc.Allocate(100, 2<<20); !errors.Is(err, nvml.ERROR_MEMORY) {
		t.Errorf("an allocation above the pinned limit = %v, want ERROR_MEMORY", err)
	}
	if err := proc.AddProcess(0, 101, 1<<20); !errors.Is(err, nvml.ERROR_IN_USE) {
		t.Errorf("a process outside MPS on the exclusive GPU = %v, want ERROR_IN_USE", err)
	}

	// Sharing removed: the daemon quits and GPU 0 gets its mode back.
	ac := adminapi.NewClient(admin, 30*time.Second)
	var changed map[string]bool
	if err := ac.Call(t.Context(), "PUT", "/v1/sharing", map[string]any{"devices": map[string]any{}}, &changed); err != nil {
		t.Fatalf("PUT /v1/sharing: %v", err)
	}
	testwait.ForErr(t, waitTimeout, "gpu 0 DEFAULT again", func() error {
		return wantMode(state, gpu0.UUID, nvml.COMPUTEMODE_DEFAULT)
	})
	testwait.ForErr(t, waitTimeout, "gpu 0's daemon gone", func() error {
		if _, err := os.Stat(filepath.Join(pipe, "control")); err == nil {
			return errors.New("still listening")
		}
		return nil
	})
}

// killDaemons kills stand-in daemons a failed test left behind (the
// agent is killed, not stopped, at the end of a test).
func killDaemons(root string) {
	pids, _ := filepath.Glob(filepath.Join(root, "*", "pipe", "control.pid"))
	for _, p := range pids {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 0 {
			if pr, err := os.FindProcess(pid); err == nil {
				_ = pr.Kill()
			}
		}
	}
}
