package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpud/gpud/internal/testkit/cgrouptest"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/test/kubeletstub"
)

// TestAgentIsolatesDevices runs the whole agent as root on the simulated
// DGX H100 against a kubepods tree in the real cgroup2 hierarchy and a
// fake kubelet: the GPU container can open only its GPU, the other
// container none, and /readyz says isolation is on.
func TestAgentIsolatesDevices(t *testing.T) {
	testAgentIsolates(t, isolateDevicePlugin)
}

// TestAgentIsolatesDRADevices is the same in DRA mode: the GPU container
// holds a claim on gpu-2 of driver gpu.gpud.io, which the fake kubelet
// lists in dynamic_resources.
func TestAgentIsolatesDRADevices(t *testing.T) {
	testAgentIsolates(t, isolateDRA)
}

// TestAgentDRAKubeletSilent: in DRA mode with a kubelet that does not fill
// dynamic_resources (feature gate off) while the driver's checkpoint holds
// a claim in namespace ml, ml's container is left unfiltered (it may hold
// a GPU nobody can see), web's is filtered, and /readyz says why.
func TestAgentDRAKubeletSilent(t *testing.T) {
	testAgentIsolates(t, isolateDRASilent)
}

// How the GPU container of testAgentIsolates gets its GPU.
const (
	isolateDevicePlugin = iota // nvidia.com/gpu from a device plugin
	isolateDRA                 // a gpu.gpud.io claim the kubelet lists
	isolateDRASilent           // a gpu.gpud.io claim the kubelet does not list
)

func testAgentIsolates(t *testing.T, mode int) {
	unified := cgrouptest.Unified(t)
	const (
		uidA = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
		uidB = "11111111-2222-3333-4444-555555555555"
	)
	cidA, cidB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	root := filepath.Join(unified, fmt.Sprintf("gpud-agent-enforce-test-%d", os.Getpid()))
	rels := []string{"", "kubepods", "kubepods/burstable", "kubepods/burstable/pod" + uidA, "kubepods/burstable/pod" + uidB}
	cgrouptest.MkTree(t, root)
	mk := func(rel string) string {
		d := filepath.Join(root, rel)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, r := range rels[1:] {
		mk(r)
	}

	dir := t.TempDir()
	proc := filepath.Join(dir, "proc")
	writeFiles(t, map[string]string{
		filepath.Join(proc, "self", "mountinfo"):                         "41 31 0:38 / " + root + " rw,relatime - cgroup2 cgroup2 rw\n",
		filepath.Join(proc, "devices"):                                   "Character devices:\n195 nvidia\n",
		filepath.Join(dir, "pods", "ml_train_"+uidA, "cuda", "0.log"):    "",
		filepath.Join(dir, "pods", "web_nginx_"+uidB, "nginx", "0.log"):  "",
		filepath.Join(dir, "containers", "train_ml_cuda-"+cidA+".log"):   "",
		filepath.Join(dir, "containers", "nginx_web_nginx-"+cidB+".log"): "",
	})
	inv, err := discovery.New(simnode.NewBuiltin("dgx-h100"), "dgx-h100", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	gpu2 := inv.GPUs[2]
	cuda := &podresourcesv1.ContainerResources{Name: "cuda",
		Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{gpu2.UUID}}}}
	args := agentArgs
	switch mode {
	case isolateDRA:
		cuda = kubeletstub.DRAContainer("cuda", "ml", "train-gpu", dra.DriverName, "dgx-h100", dra.GPUDeviceName(gpu2.Index))
	case isolateDRASilent:
		cuda = &podresourcesv1.ContainerResources{Name: "cuda"}
		// The driver's checkpoint as pkg/dra writes it, with the claim prepared.
		writeFiles(t, map[string]string{filepath.Join(dir, "plugins", dra.DriverName, dra.CheckpointName): `{"version":1,"claims":{"6f0c":` +
			`{"namespace":"ml","name":"train-gpu","state":"Prepared","devices":[]}}}`})
	}
	if mode != isolateDevicePlugin {
		args = func(dir string, extra ...string) []string { return draArgs(t, dir, extra...) }
	}
	kubelet, err := kubeletstub.StartPodResources(&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Name: "train", Namespace: "ml", Containers: []*podresourcesv1.ContainerResources{cuda}},
		{Name: "nginx", Namespace: "web", Containers: []*podresourcesv1.ContainerResources{{Name: "nginx"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	nodes := cgrouptest.GPUNodes(t, dir, 8)

	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"agent"}, args(dir, "--simulate", "dgx-h100", "--log-level", "error", "--http-addr", addr,
			"--proc-root", proc, "--pod-logs-root", filepath.Join(dir, "pods"), "--container-logs-root", filepath.Join(dir, "containers"),
			"--pod-resources-socket", kubelet.Socket(), "--enforce-interval", "200ms", "--device-plugin-dir", "", "--nri-socket", "")...), io.Discard, io.Discard)
	}()
	stopped := false
	t.Cleanup(func() {
		cancel()
		if !stopped {
			<-done
		}
	})
	ctrA := mk("kubepods/burstable/pod" + uidA + "/" + cidA)
	ctrB := mk("kubepods/burstable/pod" + uidB + "/" + cidB)
	readyz := func() string {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return err.Error()
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(body)
	}
	if mode == isolateDRASilent {
		testwait.ForErr(t, 30*time.Second, "the agent to filter the container without GPUs", func() error {
			for n, res := range cgrouptest.OpenIn(t, ctrB, nodes) {
				if res != "EPERM" {
					return fmt.Errorf("open %s = %s", n, res)
				}
			}
			return nil
		})
		testwait.ForErr(t, 30*time.Second, "/readyz to name the feature gate", func() error {
			if b := readyz(); !strings.Contains(b, "KubeletPodResourcesDynamicResources") {
				return fmt.Errorf("/readyz = %q", b)
			}
			return nil
		})
		for n, res := range cgrouptest.OpenIn(t, ctrA, nodes) {
			if res != "ENXIO" {
				t.Errorf("container of the unreported claim's namespace: open %s = %s, want ENXIO (unfiltered)", n, res)
			}
		}
		return
	}
	var gotA map[string]string
	testwait.ForErr(t, 30*time.Second, "the agent to filter the GPU container", func() error {
		gotA = cgrouptest.OpenIn(t, ctrA, nodes)
		if gotA["nvidia0"] != "EPERM" {
			return fmt.Errorf("nvidia0 = %s", gotA["nvidia0"])
		}
		return nil
	})
	t.Logf("gpu container (gpu minor %d): %v", gpu2.Minor, gotA)
	for i := range 8 {
		n, want := fmt.Sprintf("nvidia%d", i), "EPERM"
		if i == gpu2.Minor {
			want = "ENXIO"
		}
		if gotA[n] != want {
			t.Errorf("gpu container: open %s = %s, want %s", n, gotA[n], want)
		}
	}
	testwait.ForErr(t, 5*time.Second, "the agent to filter the container without GPUs", func() error {
		for n, res := range cgrouptest.OpenIn(t, ctrB, nodes) {
			if res != "EPERM" {
				return fmt.Errorf("open %s = %s", n, res)
			}
		}
		return nil
	})
	want := "device isolation: ebpf on " + root
	if mode == isolateDRA {
		want += " (DRA claims' devices)"
	}
	if body := readyz(); !strings.Contains(body, want) || strings.Contains(body, "does not report") {
		t.Errorf("/readyz = %q, want %q", body, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("agent stopped with %v", err)
	}
	stopped = true
	if got := cgrouptest.OpenIn(t, ctrA, nodes); got["nvidia0"] == "EPERM" {
		t.Errorf("after the agent stopped: open nvidia0 = EPERM, want its filter gone")
	}
}

func writeFiles(t *testing.T, files map[string]string) {
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
