// Package nodeenv runs a real Kubernetes node for tests: containerd 2.x
// (CDI and NRI on) with Debian's runc and CNI plugins, and a real kubelet
// joined to a k8senv control plane, so that gpud is driven as a cluster
// drives it.
//
// The node lives in a private mount namespace in which /var/lib, /var/log
// and /run are directories of the test (under Dir/root): the kubelet
// hard-codes /var/lib/kubelet/device-plugins/kubelet.sock and /var/log/pods
// whatever --root-dir says, and the host must not see them. Processes that
// belong to the node (gpud agent included) run in that namespace through
// Node.StartProc or Node.Command, with the paths they would use on a real
// node; the test reads and writes those paths on the host through
// Node.HostPath. Cgroups go under a cgroup root of the node's own, removed
// at the end.
//
// The node cannot pull images: the pause image and ProbeImage are built
// from static Go programs and imported with ctr. The kubelet registers the
// node with the host's own address (NodeIP; it refuses a loopback one) and
// serves on 127.0.0.1, which the API server does not dial: there is
// no `kubectl logs` or `exec`; Node.ContainerLog reads /var/log/pods
// instead.
//
// Start skips the test when a binary is missing (hack/node-bins.sh, apt-get
// install runc containernetworking-plugins), and fails it instead when
// GPUD_REQUIRE_NODE=1 (CI). It needs root.
package nodeenv

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/test/k8senv"
)

// NodeIP is the address the kubelet registers its node with: the host's
// first global IPv4 address. The kubelet refuses a loopback one and warns
// about one no interface has; with the host's own address, whatever dials
// the node (the kubelet's probes of host-network pods) stays on this
// machine. Without one, TEST-NET-1's 192.0.2.10.
func NodeIP() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
				return ipn.IP.String()
			}
		}
	}
	return "192.0.2.10"
}

// Node is a running node. Its processes are stopped, its containers
// killed and its cgroups removed when the test that started it ends.
type Node struct {
	// Name is the Node's name (and the kubelet's hostname, which resolves
	// to 127.0.0.1 inside the node's namespace).
	Name string
	// Dir is the node's directory (a t.TempDir()): Dir/root holds the
	// namespace's /var/lib, /var/log and /run; <component>.log files.
	Dir  string
	K8s  *k8senv.Env
	Bins *Binaries
	// CgroupRoot is the kubelet's cgroupRoot
	// ("/gpud-nodeenv-<test binary's pid>-<hex>"); containerd's shims go to
	// CgroupRoot/shims.
	CgroupRoot string
	// KubeletStarts counts the kubelet's starts; RestartKubelet adds one.
	KubeletStarts int

	o          options
	bridge     string // the CNI bridge's name, removed at the end
	ns         *mountNS
	containerd *k8senv.Proc
	kubelet    *k8senv.Proc
	kcm        *k8senv.Proc
	procs      []*k8senv.Proc // started through StartProc, stopped at the end
}

type options struct {
	gates   map[string]bool
	kcm     bool
	timeout time.Duration
}

// Option changes how Start runs the node.
type Option func(*options)

// WithFeatureGates sets kubelet feature gates over k8senv.DefaultFeatureGates
// (those the kubelet knows).
func WithFeatureGates(gates map[string]bool) Option {
	return func(o *options) {
		for k, v := range gates {
			o.gates[k] = v
		}
	}
}

// WithControllerManager also runs kube-controller-manager against the
// control plane (ResourceClaims from ResourceClaimTemplates, garbage
// collection), outside the node's namespace.
func WithControllerManager() Option {
	return func(o *options) { o.kcm = true }
}

// Require returns the node's binaries, or skips t when one is missing or
// the test does not run as root (fails it under GPUD_REQUIRE_NODE=1).
// Start calls it; a test calls it first to skip before starting a control
// plane for nothing.
func Require(t testing.TB) *Binaries {
	t.Helper()
	bins, err := FindBinaries()
	if err == nil && os.Geteuid() != 0 {
		err = fmt.Errorf("nodeenv: a node needs root (mount namespace, cgroups, runc)")
	}
	if err != nil {
		if os.Getenv("GPUD_REQUIRE_NODE") == "1" {
			t.Fatalf("%v (GPUD_REQUIRE_NODE=1)", err)
		}
		t.Skipf("%v (set GPUD_REQUIRE_NODE=1 to fail instead of skip)", err)
	}
	return bins
}

// Start runs containerd and a kubelet joined to k's API server and returns
// once the Node is Ready. It skips t when a binary is missing (fails it
// under GPUD_REQUIRE_NODE=1).
func Start(t testing.TB, k *k8senv.Env, opts ...Option) *Node {
	t.Helper()
	o := options{gates: map[string]bool{}, timeout: 3 * time.Minute}
	// The kubelet refuses gates it does not know; these it does.
	for _, g := range []string{"DRAConsumableCapacity", "DRAPartitionableDevices", "DRADeviceTaints", "DRAExtendedResource"} {
		if v, ok := k8senv.DefaultFeatureGates[g]; ok {
			o.gates[g] = v
		}
	}
	for _, opt := range opts {
		opt(&o)
	}
	bins := Require(t)
	suffix := randHex(4)
	n := &Node{
		Name:       "nodeenv-" + suffix,
		Dir:        t.TempDir(),
		K8s:        k,
		Bins:       bins,
		CgroupRoot: "/" + cgroupRootPrefix + strconv.Itoa(os.Getpid()) + "-" + suffix,
		o:          o,
	}
	t.Cleanup(func() { n.stop(t) })
	begin := time.Now()
	if err := n.setup(); err != nil {
		t.Fatal(err)
	}
	if err := n.startContainerd(); err != nil {
		t.Fatal(err)
	}
	images, err := buildImages(n.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := n.Command(bins.Ctr, "--address", "/run/containerd/containerd.sock", "-n", "k8s.io", "images", "import", images).CombinedOutput(); err != nil {
		t.Fatalf("nodeenv: ctr images import: %v\n%s", err, out)
	}
	if o.kcm {
		if err := n.startControllerManager(); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.StartKubelet(); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitReady(o.timeout); err != nil {
		t.Fatal(err)
	}
	t.Logf("nodeenv: node %s (kubelet %s, containerd %s) Ready in %s; dir %s",
		n.Name, k8senv.KubeVersion(), filepath.Base(bins.ContainerdDir), time.Since(begin).Round(time.Millisecond), n.Dir)
	return n
}

// setup makes the node's directories, its /etc/hosts, cgroup root and
// mount namespace.
func (n *Node) setup() error {
	hosts := filepath.Join(n.Dir, "hosts")
	if err := writeFile(hosts, "127.0.0.1 localhost "+n.Name+"\n::1 localhost\n"); err != nil {
		return err
	}
	for _, d := range []string{"/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/run/containerd", "/var/run/cdi", "/var/run/nri"} {
		if err := os.MkdirAll(n.HostPath(d), 0o755); err != nil {
			return fmt.Errorf("nodeenv: %w", err)
		}
	}
	sweepStaleCgroupRoots()
	if err := makeCgroupRoot(n.CgroupRoot); err != nil {
		return err
	}
	ns, err := newMountNS(n.Bins, filepath.Join(n.Dir, "root"), hosts)
	if err != nil {
		return err
	}
	n.ns = ns
	return nil
}

// HostPath is where path, as the node's processes see it, lies on the
// host: paths under HostDirs are in Dir/root, others are the host's own.
func (n *Node) HostPath(path string) string {
	path = filepath.Clean(path)
	if strings.HasPrefix(path, "/var/run/") || path == "/var/run" {
		path = "/run" + strings.TrimPrefix(path, "/var/run")
	}
	for _, d := range HostDirs {
		if path == d || strings.HasPrefix(path, d+"/") {
			return filepath.Join(n.Dir, "root", path)
		}
	}
	return path
}

// Command is exec.Command(bin, args...) run inside the node's namespace.
func (n *Node) Command(bin string, args ...string) *exec.Cmd {
	return n.ns.command(bin, args...)
}

// StartProc runs bin with args inside the node's namespace, its output in
// Dir/<name>.log (appended to across restarts), until Stop or the end of
// the test; it is killed if the test binary dies.
func (n *Node) StartProc(name, bin string, args []string) (*k8senv.Proc, error) {
	p, err := n.startProc(name, bin, args)
	if err != nil {
		return nil, err
	}
	n.procs = append(n.procs, p)
	return p, nil
}

func (n *Node) startProc(name, bin string, args []string) (*k8senv.Proc, error) {
	nbin, nargs := n.ns.wrap(bin, args)
	return k8senv.StartProc(name, nbin, nargs, filepath.Join(n.Dir, name+".log"), k8senv.ProcOptions{Setup: func(cmd *exec.Cmd) {
		cmd.Dir = n.Dir
		cmd.Env = append(os.Environ(), "HOME="+n.Dir, "TMPDIR="+n.Dir, "KUBECONFIG=")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}})
}

func (n *Node) startContainerd() error {
	conf := filepath.Join(n.Dir, "containerd.toml")
	cniConf := filepath.Join(n.Dir, "cni")
	if err := writeFile(conf, containerdConfig(n.Bins.Runc, n.Bins.CNIDir, cniConf, n.CgroupRoot+"/shims")); err != nil {
		return err
	}
	n.bridge = "nodeenv" + n.Name[len("nodeenv-"):] // 15 bytes: IFNAMSIZ-1
	if err := writeFile(filepath.Join(cniConf, "10-nodeenv.conflist"), cniConfig(n.bridge)); err != nil {
		return err
	}
	// containerd runs its shim from $PATH: put the shim's directory first.
	p, err := n.startProc("containerd", "/usr/bin/env", []string{"PATH=" + n.Bins.ContainerdDir + ":" + os.Getenv("PATH"), n.Bins.Containerd, "--config", conf})
	if err != nil {
		return err
	}
	n.containerd = p
	return wait(p, "containerd's socket", n.o.timeout, func() error {
		out, err := n.Command(n.Bins.Ctr, "--address", "/run/containerd/containerd.sock", "version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}

// RestartContainerd stops containerd (SIGTERM; running containers stay)
// and starts it again.
func (n *Node) RestartContainerd() error {
	n.containerd.Stop(20 * time.Second)
	return n.startContainerd()
}

func (n *Node) startControllerManager() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + n.K8s.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		// No node lifecycle: a kubelet restart must not taint the
		// node or evict its pods; no IPAM: the node has no pod CIDR.
		"--controllers=*,-nodeipam,-nodelifecycle",
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		"--feature-gates=" + gateFlag(k8senv.DefaultFeatureGates),
	}
	p, err := k8senv.StartProc("kube-controller-manager", n.Bins.ControllerManager, args, filepath.Join(n.Dir, "kube-controller-manager.log"), k8senv.ProcOptions{Setup: func(cmd *exec.Cmd) {
		cmd.Dir = n.Dir
		cmd.Env = append(os.Environ(), "HOME="+n.Dir, "TMPDIR="+n.Dir, "KUBECONFIG=")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}})
	if err != nil {
		return err
	}
	n.kcm = p
	hc := &http.Client{Timeout: 2 * time.Second, Transport: insecureTransport()}
	return wait(p, "kube-controller-manager's /healthz", n.o.timeout, func() error {
		return getOK(hc, fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
	})
}

// StartKubelet starts the kubelet (after StopKubelet); it does not wait
// for the node to be Ready (WaitReady).
func (n *Node) StartKubelet() error {
	if n.kubelet != nil {
		if ok, _ := n.kubelet.Exited(); !ok {
			return fmt.Errorf("nodeenv: the kubelet is running")
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	hport, err := freePort()
	if err != nil {
		return err
	}
	conf := filepath.Join(n.Dir, "kubelet.yaml")
	if err := writeFile(conf, kubeletConfig(port, hport, n.CgroupRoot, n.o.gates)); err != nil {
		return err
	}
	p, err := n.startProc("kubelet", n.Bins.Kubelet, []string{
		"--config=" + conf,
		"--kubeconfig=" + n.K8s.Kubeconfig,
		"--hostname-override=" + n.Name,
		"--node-ip=" + NodeIP(),
		"--v=3", // 3: "Registered DRA plugin" lines, which tests count
	})
	if err != nil {
		return err
	}
	n.kubelet = p
	n.KubeletStarts++
	hc := &http.Client{Timeout: 2 * time.Second}
	return wait(p, "the kubelet's /healthz", n.o.timeout, func() error {
		return getOK(hc, fmt.Sprintf("http://127.0.0.1:%d/healthz", hport))
	})
}

// StopKubelet stops the kubelet (SIGTERM, then SIGKILL after 10s); pods
// keep running, as on a real node.
func (n *Node) StopKubelet() {
	if n.kubelet != nil {
		n.kubelet.Stop(10 * time.Second)
	}
}

// RestartKubelet stops the kubelet and starts it again.
func (n *Node) RestartKubelet() error {
	n.StopKubelet()
	return n.StartKubelet()
}

// Kubelet is the kubelet process (its log: Kubelet().LogPath).
func (n *Node) Kubelet() *k8senv.Proc { return n.kubelet }

// WaitReady waits until the Node exists and is Ready.
func (n *Node) WaitReady(timeout time.Duration) error {
	return wait(n.kubelet, "node "+n.Name+" to be Ready", timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		node, err := n.K8s.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("condition Ready=%s: %s: %s", c.Status, c.Reason, c.Message)
			}
		}
		return fmt.Errorf("no Ready condition yet")
	})
}

// ContainerLog is the current log of a container of a pod on the node, as
// `kubectl logs` would show it (CRI log lines, the prefix removed).
func (n *Node) ContainerLog(namespace, pod, container string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := n.K8s.Client.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("nodeenv: %w", err)
	}
	dir := n.HostPath(filepath.Join("/var/log/pods", namespace+"_"+pod+"_"+string(p.UID), container))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("nodeenv: no log of %s/%s %s yet: %w", namespace, pod, container, err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".log") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return "", fmt.Errorf("nodeenv: no log of %s/%s %s yet", namespace, pod, container)
	}
	// <restart count>.log: the highest is the current container.
	slices.SortFunc(names, func(a, b string) int {
		ai, _ := strconv.Atoi(strings.TrimSuffix(a, ".log"))
		bi, _ := strconv.Atoi(strings.TrimSuffix(b, ".log"))
		return ai - bi
	})
	f, err := os.Open(filepath.Join(dir, names[len(names)-1]))
	if err != nil {
		return "", fmt.Errorf("nodeenv: %w", err)
	}
	defer f.Close()
	var out strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		// <time> <stream> <P|F> <content>
		parts := strings.SplitN(sc.Text(), " ", 4)
		if len(parts) == 4 {
			out.WriteString(parts[3])
			if parts[2] == "F" {
				out.WriteByte('\n')
			}
		}
	}
	return out.String(), nil
}

// ProbeReport is what ProbeImage's container reports of its own view.
type ProbeReport struct {
	Env    map[string]string `json:"env"`
	Opens  map[string]string `json:"opens"` // /dev/nvidia* path -> "ok", "ENXIO", "EPERM", ...
	Mounts []string          `json:"mounts"`
}

// Openable are the device files the container could open (the device
// cgroup let it: "ok" or ENXIO, as a fake device node answers), sorted.
func (r *ProbeReport) Openable() []string {
	var out []string
	for p, res := range r.Opens {
		if res == "ok" || res == "ENXIO" {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Probe waits for the last report of a ProbeImage container and returns
// it.
func (n *Node) Probe(namespace, pod, container string, timeout time.Duration) (*ProbeReport, error) {
	deadline := time.Now().Add(timeout)
	for {
		log, err := n.ContainerLog(namespace, pod, container)
		if err == nil {
			lines := strings.Split(strings.TrimSpace(log), "\n")
			for i := len(lines) - 1; i >= 0; i-- {
				if js, ok := strings.CutPrefix(lines[i], "PROBE "); ok {
					var r ProbeReport
					if err := json.Unmarshal([]byte(js), &r); err != nil {
						return nil, fmt.Errorf("nodeenv: probe report of %s/%s: %w", namespace, pod, err)
					}
					return &r, nil
				}
			}
			err = fmt.Errorf("no PROBE line in %q", log)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("nodeenv: no probe report from %s/%s %s in %s: %w", namespace, pod, container, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// ProbePod is a pod of one ProbeImage container named "probe" on this
// node (host network: the node's CNI network is not needed), with limits
// (for instance nvidia.com/gpu: 1). It is not created.
func (n *Node) ProbePod(namespace, name string, limits corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": n.Name},
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name:            "probe",
				Image:           ProbeImage,
				ImagePullPolicy: corev1.PullNever,
				Resources:       corev1.ResourceRequirements{Limits: limits},
			}},
		},
	}
}

// stuckReasons are the reasons of a waiting container that the kubelet
// retries but that do not go away by themselves (a runtime or device
// error, an image the node does not have).
var stuckReasons = map[string]bool{
	"CreateContainerError": true, "CreateContainerConfigError": true, "RunContainerError": true,
	"ErrImageNeverPull": true, "UnexpectedAdmissionError": true, "CrashLoopBackOff": true,
}

// stuckFor is how long a container may wait with one of stuckReasons
// before WaitPodPhase gives up.
const stuckFor = 20 * time.Second

// WaitPodPhase waits until the pod reaches phase and returns it; a pod
// that reaches another final phase, or one whose container has waited for
// stuckFor with an error that does not go away by itself, ends the wait
// early, the pod's status in the error.
func (n *Node) WaitPodPhase(namespace, name string, phase corev1.PodPhase, timeout time.Duration) (*corev1.Pod, error) {
	deadline := time.Now().Add(timeout)
	var last *corev1.Pod
	var stuckSince time.Time
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		p, err := n.K8s.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		cancel()
		if err == nil {
			last = p
			if p.Status.Phase == phase {
				return p, nil
			}
			if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
				return p, fmt.Errorf("nodeenv: pod %s/%s is %s, want %s: %s", namespace, name, p.Status.Phase, phase, podStatus(p))
			}
			stuck := stuckReasons[p.Status.Reason]
			for _, cs := range p.Status.ContainerStatuses {
				stuck = stuck || (cs.State.Waiting != nil && stuckReasons[cs.State.Waiting.Reason])
			}
			switch {
			case !stuck:
				stuckSince = time.Time{}
			case stuckSince.IsZero():
				stuckSince = time.Now()
			case time.Since(stuckSince) > stuckFor:
				return p, fmt.Errorf("nodeenv: pod %s/%s stuck for %s: %s", namespace, name, stuckFor, podStatus(p))
			}
		} else if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("nodeenv: %w", err)
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("nodeenv: pod %s/%s not %s after %s: %s", namespace, name, phase, timeout, podStatus(last))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// podStatus sums up why a pod is where it is, for error messages.
func podStatus(p *corev1.Pod) string {
	if p == nil {
		return "no pod"
	}
	parts := []string{"phase " + string(p.Status.Phase)}
	if p.Status.Reason != "" || p.Status.Message != "" {
		parts = append(parts, p.Status.Reason+": "+p.Status.Message)
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			parts = append(parts, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			parts = append(parts, fmt.Sprintf("container %s waiting %s: %s", cs.Name, w.Reason, w.Message))
		}
		if t := cs.State.Terminated; t != nil {
			parts = append(parts, fmt.Sprintf("container %s terminated %s (exit %d): %s", cs.Name, t.Reason, t.ExitCode, t.Message))
		}
	}
	return strings.Join(parts, "; ")
}

// stop ends everything the node started, newest first, kills what is left
// in its namespace and cgroups (shims, containers), and removes its
// cgroups. Logs' tails go to the test log when it failed.
func (n *Node) stop(t testing.TB) {
	all := append([]*k8senv.Proc{n.containerd, n.kubelet, n.kcm}, n.procs...)
	if t.Failed() {
		for _, p := range all {
			if p != nil {
				t.Logf("nodeenv: last lines of %s (%s):\n%s", p.Name, p.LogPath, p.Tail(40))
			}
		}
	}
	for _, p := range slices.Backward(n.procs) {
		p.Stop(10 * time.Second)
	}
	for _, p := range []*k8senv.Proc{n.kubelet, n.kcm, n.containerd} {
		if p != nil {
			p.Stop(10 * time.Second)
		}
	}
	killCgroup(n.CgroupRoot)
	if n.ns != nil {
		n.ns.close()
	}
	if err := removeCgroupRoot(n.CgroupRoot); err != nil {
		t.Errorf("nodeenv: %v", err)
	}
	// The bridge a pod without host network made (its veths went with the
	// pods' network namespaces).
	if _, err := net.InterfaceByName(n.bridge); err == nil && n.bridge != "" {
		if out, err := exec.Command("ip", "link", "del", n.bridge).CombinedOutput(); err != nil {
			t.Errorf("nodeenv: remove bridge %s: %v: %s", n.bridge, err, out)
		}
	}
	// Delete the Node so a later node in the same control plane starts
	// clean (and nothing schedules to this one).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.K8s.Client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{})
}

// wait polls check until it succeeds, p exits, or timeout passes.
func wait(p *k8senv.Proc, what string, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		if p != nil {
			if done, err := p.Exited(); done {
				return fmt.Errorf("nodeenv: %s exited (%v) before %s; log %s:\n%s", p.Name, err, what, p.LogPath, p.Tail(30))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nodeenv: timed out after %s waiting for %s; last error: %v", timeout, what, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func getOK(hc *http.Client, url string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("nodeenv: no free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func gateFlag(gates map[string]bool) string {
	var parts []string
	for k, v := range gates {
		parts = append(parts, fmt.Sprintf("%s=%t", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func ptr[T any](v T) *T { return &v }
