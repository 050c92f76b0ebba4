package test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/internal/openbdata"
	"github.com/gpud/gpud/internal/testkit/testbuf"
)

// readmeCommandsNeedingANode are the README "Commands" lines this test does
// not run as written, each with why; every one must still be in the README.
var readmeCommandsNeedingANode = map[string]string{
	"gpud agent ":     "runs until stopped: the make run part of this test runs the same command on the simulated node",
	"gpud mig apply ": "goes through a node's running agent at its default admin socket (/run/gpud/admin.sock)",
}

// TestFreshCheckoutREADME does what a new user does after cloning: `make
// run` in a checkout that has never built gpud, then every command of the
// README's "Commands" section as written. It fails if make run does not
// serve the simulated DGX H100's 8 GPUs, does not stop cleanly on Ctrl-C,
// leaves anything outside the checkout, or if a command exits non-zero.
func TestFreshCheckoutREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gpud from a fresh checkout")
	}
	for _, tool := range []string{"git", "make", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	repo := freshCheckout(t)

	t.Run("make run", func(t *testing.T) { testMakeRun(t, repo) })

	bin := filepath.Join(repo, "bin", "gpud")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("make run left no %s: %v", bin, err)
	}
	trace := openbdata.Dir()
	haveTrace := fileExists(filepath.Join(trace, "openb_node_list_gpu_node.csv"))
	if haveTrace {
		// What `make traces` downloads where the network allows.
		if err := os.MkdirAll(filepath.Join(repo, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		abs, err := filepath.Abs(trace)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(repo, openbdata.InRepo)); err != nil {
			t.Fatal(err)
		}
	}
	cmds := readmeCommands(t, filepath.Join(repo, "README.md"))
	skipped := map[string]bool{}
	for _, c := range cmds {
		name := c
		if len(name) > 60 {
			name = name[:60]
		}
		t.Run(name, func(t *testing.T) {
			for prefix, why := range readmeCommandsNeedingANode {
				if strings.HasPrefix(c, prefix) {
					skipped[prefix] = true
					t.Skip(why)
				}
			}
			if !haveTrace && strings.Contains(c, "data/openb-gpu-v2023") {
				t.Skipf("no openb trace at %s (make traces puts it in data/)", trace)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", c)
			cmd.Dir = repo
			cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("README command failed: %v\n$ %s\n%s", err, c, tail(out, 4000))
			}
		})
	}
	for prefix := range readmeCommandsNeedingANode {
		if !skipped[prefix] {
			t.Errorf("the README's Commands no longer has %q: drop it from readmeCommandsNeedingANode", prefix)
		}
	}
}

// testMakeRun runs `make run` as README says (on a free port instead of
// 9400, which a developer's own agent may hold), waits for the agent to
// serve, stops it as Ctrl-C does and checks what it left.
func testMakeRun(t *testing.T, repo string) {
	tmp := filepath.Join(t.TempDir(), "tmp") // the run's TMPDIR: must stay empty
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	addr := freeLoopbackAddr(t)
	var out testbuf.Buffer
	cmd := exec.Command("make", "run", "RUN_HTTP_ADDR="+addr)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a terminal's process group: Ctrl-C reaches make and gpud
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}()

	base := "http://" + addr
	deadline := time.Now().Add(10 * time.Minute) // the first build of gpud in a new checkout
	var metrics string
	for {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("make run exited before serving: %v\n%s", err, tail([]byte(out.String()), 4000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("make run: no 8 GPUs on %s/metrics after 10m\n%s", base, tail([]byte(out.String()), 4000))
		}
		if httpOK(base+"/healthz") && httpOK(base+"/readyz") {
			if m, err := httpBody(base + "/metrics"); err == nil && len(gpuSeries(m, "DCGM_FI_DEV_GPU_UTIL")) == 8 {
				metrics = m
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := gpuSeries(metrics, "DCGM_FI_DEV_GPU_UTIL"); len(got) != 8 {
		t.Fatalf("DCGM_FI_DEV_GPU_UTIL for GPUs %v, want 0-7", got)
	}

	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		stopped = true
	case <-time.After(30 * time.Second):
		t.Fatalf("make run still running 30s after Ctrl-C\n%s", tail([]byte(out.String()), 4000))
	}
	if err := syscall.Kill(-cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("a process of make run outlived it (kill -0 on its group: %v)", err)
	}
	log := out.String()
	if !strings.Contains(log, `msg="agent stopped"`) {
		t.Errorf("the agent did not stop cleanly on Ctrl-C:\n%s", tail([]byte(log), 4000))
	}
	if strings.Contains(log, "level=ERROR") {
		t.Errorf("make run logged errors:\n%s", tail([]byte(log), 4000))
	}
	if entries, _ := os.ReadDir(tmp); len(entries) > 0 {
		t.Errorf("make run left %d files in its TMPDIR (outside the checkout), e.g. %s", len(entries), entries[0].Name())
	}
	if !fileExists(filepath.Join(repo, ".run", "simnode-state.json")) {
		t.Errorf("no .run/simnode-state.json: the simulated node's state went elsewhere")
	}
}

// freshCheckout copies what a clone of this repository holds (tracked
// files, and new ones git does not ignore: the working tree as it would be
// committed) into a new directory, and returns it.
func freshCheckout(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	list, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v)", err)
	}
	dst := filepath.Join(t.TempDir(), "gpud")
	n := 0
	for _, rel := range strings.Split(string(list), "\x00") {
		if rel == "" {
			continue
		}
		src := filepath.Join(root, rel)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree, or a link
		}
		if err := copyFile(src, filepath.Join(dst, rel), fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n < 100 {
		t.Fatalf("fresh checkout has %d files: git ls-files listed too few", n)
	}
	if fileExists(filepath.Join(dst, ".run")) || fileExists(filepath.Join(dst, "bin")) {
		t.Fatal("a fresh checkout must have no .run/ or bin/")
	}
	return dst
}

func copyFile(src, dst string, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// readmeCommands returns the shell commands of the README's "## Commands"
// code block: continuation lines joined, comments dropped.
func readmeCommands(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	inSection, inBlock, cur := false, false, ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			inSection = line == "## Commands"
			continue
		case !inSection:
			continue
		case strings.HasPrefix(line, "```"):
			if inBlock {
				inSection = false // the section's first block only
			}
			inBlock = !inBlock
			continue
		case !inBlock:
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if strings.HasSuffix(line, `\`) {
			cur += strings.TrimSuffix(line, `\`)
			continue
		}
		if c := strings.TrimSpace(cur + line); c != "" {
			cmds = append(cmds, strings.Join(strings.Fields(c), " "))
		}
		cur = ""
	}
	if len(cmds) < 5 {
		t.Fatalf("found %d commands in the README's Commands section: the section moved?", len(cmds))
	}
	return cmds
}

var gpuLabel = regexp.MustCompile(`gpu="(\d+)"`)

// gpuSeries returns the gpu labels of a metric's series in a scrape.
func gpuSeries(scrape, metric string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(scrape, "\n") {
		if strings.HasPrefix(line, metric+"{") {
			if m := gpuLabel.FindStringSubmatch(line); m != nil {
				out[m[1]] = true
			}
		}
	}
	return out
}

func httpOK(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func httpBody(url string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(b), err
}

// freeLoopbackAddr returns a loopback address no one listens on now.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
