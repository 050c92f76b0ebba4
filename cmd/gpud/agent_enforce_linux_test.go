package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpud/gpud/internal/testwait"
	"github.com/gpud/gpud/pkg/cgroupfs"
	"github.com/gpud/gpud/pkg/devcgroup"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/test/kubeletstub"
)

// openInCgroup opens each path read-only from a shell started inside the
// cgroup dir and returns "ok", "EPERM", "ENXIO" or the shell's message by
// base name.
func openInCgroup(t *testing.T, dir string, paths []string) map[string]string {
	t.Helper()
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	script := `for p in "$@"; do if (exec 3<"$p") 2>/dev/null; then echo "$p ok"; else echo "$p $( (exec 3<"$p") 2>&1 )"; fi; done`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, paths...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("shell in %s: %v", dir, err)
	}
	got := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		p, res, _ := strings.Cut(line, " ")
		switch {
		case strings.Contains(res, "not permitted"):
			res = "EPERM"
		case strings.Contains(res, "No such device"):
			res = "ENXIO"
		}
		got[filepath.Base(p)] = res
	}
	return got
}

// TestAgentIsolatesDevices runs the whole agent as root on the simulated
// DGX H100 against a kubepods tree in the real cgroup2 hierarchy and a
// fake kubelet: the GPU container can open only its GPU, the other
// container none, and /readyz says isolation is on.
func TestAgentIsolatesDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates cgroups, mknods devices, loads BPF programs")
	}
	if err := devcgroup.Probe(); err != nil {
		t.Skipf("kernel: %v", err)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no mountinfo: %v", err)
	}
	mounts, err := cgroupfs.Parse(f)
	f.Close()
	if err != nil || mounts.Unified == "" {
		t.Skipf("no cgroup2 mount (%v)", err)
	}
	const (
		uidA = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
		uidB = "11111111-2222-3333-4444-555555555555"
	)
	cidA, cidB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	root := filepath.Join(mounts.Unified, fmt.Sprintf("gpud-agent-enforce-test-%d", os.Getpid()))
	rels := []string{"", "kubepods", "kubepods/burstable", "kubepods/burstable/pod" + uidA, "kubepods/burstable/pod" + uidB}
	var made []string
	t.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			if err := os.Remove(made[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("remove test cgroup %s: %v", made[i], err)
			}
		}
	})
	mk := func(rel string) string {
		d := filepath.Join(root, rel)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		made = append(made, d)
		return d
	}
	for _, r := range rels {
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
	var nodes []string
	for i := range 8 {
		p := filepath.Join(dir, fmt.Sprintf("nvidia%d", i))
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(devcgroup.GPUMajor, uint32(i)))); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, p)
	}

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
		gotA = openInCgroup(t, ctrA, nodes)
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
		for n, res := range openInCgroup(t, ctrB, nodes) {
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
	if got := openInCgroup(t, ctrA, nodes); got["nvidia0"] == "EPERM" {
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
