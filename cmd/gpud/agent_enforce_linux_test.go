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

	"github.com/gpud/gpud/internal/cgrouptest"
	"github.com/gpud/gpud/internal/testwait"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/test/kubeletstub"
)

// TestAgentIsolatesDevices runs the whole agent as root on the simulated
// DGX H100 against a kubepods tree in the real cgroup2 hierarchy and a
// fake kubelet: the GPU container can open only its GPU, the other
// container none, and /readyz says isolation is on.
func TestAgentIsolatesDevices(t *testing.T) {
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
	kubelet, err := kubeletstub.StartPodResources(&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Name: "train", Namespace: "ml", Containers: []*podresourcesv1.ContainerResources{{Name: "cuda",
			Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{gpu2.UUID}}}}}},
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
		done <- run(ctx, append([]string{"agent"}, agentArgs(dir, "--simulate", "dgx-h100", "--log-level", "error", "--http-addr", addr,
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
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "device isolation: ebpf on "+root) {
		t.Errorf("/readyz = %q, want the isolation line", body)
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
