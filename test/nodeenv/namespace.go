package nodeenv

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// HostDirs are the host directories the node's mount namespace replaces
// with directories of its own (under <Dir>/root): the kubelet writes
// /var/lib/kubelet/device-plugins/kubelet.sock and /var/log/pods whatever
// --root-dir says, containerd and gpud default to /run and /var/lib, and
// none of that may reach the host (test/hostpaths_test.go forbids it).
var HostDirs = []string{"/var/lib", "/var/log", "/run"}

// mountNS is a private mount namespace, kept alive by a holder process
// (unshare ... sleep) that every process of the node joins with nsenter.
type mountNS struct {
	holder  *exec.Cmd
	done    chan struct{}
	nsPath  string // /proc/<holder>/ns/mnt
	nsenter string
}

// newMountNS starts the holder: in a new mount namespace with private
// propagation (nothing mounted inside shows on the host), it bind-mounts
// root/<dir> over each of HostDirs and hostsFile over /etc/hosts, then
// sleeps until killed.
func newMountNS(b *Binaries, root, hostsFile string) (*mountNS, error) {
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, d := range HostDirs {
		src := filepath.Join(root, d)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return nil, fmt.Errorf("nodeenv: %w", err)
		}
		fmt.Fprintf(&script, "mount --bind %q %q\n", src, d)
	}
	fmt.Fprintf(&script, "mount --bind %q /etc/hosts\n", hostsFile)
	script.WriteString("echo ready\nexec sleep 2147483647\n")
	cmd := exec.Command(b.Unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("nodeenv: %w", err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("nodeenv: start the mount namespace: %w", err)
	}
	ns := &mountNS{holder: cmd, done: make(chan struct{}), nsenter: b.Nsenter,
		nsPath: "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/mnt"}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("unexpected %q", line)
		}
		ready <- err
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(ns.done) }()
	select {
	case err := <-ready:
		if err != nil {
			ns.close()
			return nil, fmt.Errorf("nodeenv: the mount namespace's setup failed: %v: %s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		ns.close()
		return nil, fmt.Errorf("nodeenv: the mount namespace's setup did not finish in 30s: %s", stderr.String())
	}
	return ns, nil
}

// command runs bin with args inside the namespace.
func (ns *mountNS) command(bin string, args ...string) *exec.Cmd {
	return exec.Command(ns.nsenter, append([]string{"--mount=" + ns.nsPath, "--", bin}, args...)...)
}

// wrap turns bin and args into the nsenter command line that runs them
// inside the namespace.
func (ns *mountNS) wrap(bin string, args []string) (string, []string) {
	return ns.nsenter, append([]string{"--mount=" + ns.nsPath, "--", bin}, args...)
}

// members are the processes in the namespace other than the holder (the
// node's daemons, the shims and the containers they run).
func (ns *mountNS) members() []int {
	want, err := os.Readlink(ns.nsPath)
	if err != nil {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == ns.holder.Process.Pid {
			continue
		}
		if got, err := os.Readlink("/proc/" + e.Name() + "/ns/mnt"); err == nil && got == want {
			pids = append(pids, pid)
		}
	}
	return pids
}

// close kills every process left in the namespace (all of them started by
// this environment: containerd's shims and the containers outlive the
// daemons), then the holder, which ends the namespace and its mounts.
func (ns *mountNS) close() {
	for range 3 {
		pids := ns.members()
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(200 * time.Millisecond)
	}
	_ = ns.holder.Process.Kill()
	<-ns.done
}
