package k8senv

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ControllerManagerBinary is where hack/kube-bins.sh puts
// kube-controller-manager (with the kubelet, for test/nodeenv):
// $GPUD_NODE_BINS/<version>, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/gpud/node-bins/<version>. hack/k8s-bins.sh
// builds it in the same go build as kube-apiserver, so it is there whenever
// they are.
func ControllerManagerBinary() (string, error) {
	root := os.Getenv("GPUD_NODE_BINS")
	if root == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("k8senv: neither GPUD_NODE_BINS, XDG_CACHE_HOME nor HOME is set: %w", err)
			}
			cache = filepath.Join(home, ".cache")
		}
		root = filepath.Join(cache, "gpud", "node-bins")
	}
	p := filepath.Join(root, KubeVersion(), "kube-controller-manager")
	if !isExecutable(p) {
		return p, fmt.Errorf("k8senv: %s missing; build it with hack/k8s-bins.sh (or hack/node-bins.sh; GPUD_NODE_BINS overrides the cache dir)", p)
	}
	return p, nil
}

// StartControllerManager runs kube-controller-manager against the
// environment with only the named controllers ("job-controller",
// "resourceclaim-controller", "garbage-collector-controller", ...: the
// names of its --controllers flag), with the admin identity and no leader
// election, and waits for its /healthz. The environment's other tests do
// without one (see the package comment); a test that needs what a
// controller does (Jobs creating pods, ResourceClaims made from
// templates) starts the ones it needs. It skips t when the binary is
// missing (fails it under GPUD_REQUIRE_K8S=1). The process stops with the
// environment.
func (e *Env) StartControllerManager(t testing.TB, controllers ...string) {
	t.Helper()
	bin, err := ControllerManagerBinary()
	if err != nil {
		if os.Getenv("GPUD_REQUIRE_K8S") == "1" {
			t.Fatalf("%v (GPUD_REQUIRE_K8S=1)", err)
		}
		t.Skipf("%v (set GPUD_REQUIRE_K8S=1 to fail instead of skip)", err)
	}
	if len(controllers) == 0 {
		t.Fatal("k8senv: StartControllerManager needs at least one controller")
	}
	begin := time.Now()
	err = e.startRetrying(func() (*Proc, error) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		args := []string{
			"--kubeconfig=" + e.Kubeconfig,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + filepath.Join(e.Dir, "kube-controller-manager-certs"),
			"--controllers=" + strings.Join(controllers, ","),
			"--use-service-account-credentials=false",
			"--leader-elect=false",
			"--feature-gates=" + gateFlag(DefaultFeatureGates),
		}
		p, err := startProc(e.Dir, "kube-controller-manager", bin, args)
		if err != nil {
			return nil, err
		}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: insecureLoopback()}
		url := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
		return p, waitFor(p, "kube-controller-manager "+url, 3*time.Minute, func() error { return getOK(hc, url) })
	})
	if err != nil {
		t.Fatal(err)
	}
	e.Phases["kube-controller-manager"] = time.Since(begin)
}

// insecureLoopback is the transport for a component's own self-signed
// health endpoint on 127.0.0.1.
func insecureLoopback() *http.Transport {
	return &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // loopback, the component's own self-signed cert
}
