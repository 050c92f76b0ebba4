package k8senv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
)

// fallbackKubeVersion is used when the test binary carries no build info for
// k8s.io/api (it always does when built with modules).
const fallbackKubeVersion = "v1.37.2"

// KubeVersion is the Kubernetes release whose kube-apiserver and
// kube-scheduler the environment runs: v1.<minor>.<patch> of the k8s.io/api
// module (v0.<minor>.<patch>) this binary is built with. hack/k8s-bins.sh
// applies the same rule to `go list -m k8s.io/api`.
func KubeVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path != "k8s.io/api" {
				continue
			}
			v := dep.Version
			if dep.Replace != nil {
				v = dep.Replace.Version
			}
			if rest, ok := strings.CutPrefix(v, "v0."); ok {
				return "v1." + rest
			}
		}
	}
	return fallbackKubeVersion
}

// Binaries are the executables one environment runs.
type Binaries struct {
	Dir           string // the versioned directory kube-apiserver and kube-scheduler were found in
	APIServer     string
	Scheduler     string
	Etcd          string
	EtcdVersion   string // first line of `etcd --version`
	SearchedPaths []string
}

// BinDir is where hack/k8s-bins.sh puts (and this package looks for) the
// binaries of version: $GPUD_K8S_BINS/<version>, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/gpud/k8s-bins/<version>. A GPUD_K8S_BINS
// that already holds kube-apiserver (the directory the script prints) is
// used as it is.
func BinDir(version string) (string, error) {
	if root := os.Getenv("GPUD_K8S_BINS"); root != "" {
		if isExecutable(filepath.Join(root, "kube-apiserver")) {
			return root, nil
		}
		return filepath.Join(root, version), nil
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("k8senv: neither GPUD_K8S_BINS, XDG_CACHE_HOME nor HOME is set: %w", err)
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "gpud", "k8s-bins", version), nil
}

// FindBinaries looks up kube-apiserver and kube-scheduler in BinDir, and etcd
// in BinDir first (a source-built one) and then on $PATH (Debian's
// etcd-server). The error says what is missing and how to get it.
func FindBinaries() (*Binaries, error) {
	version := KubeVersion()
	dir, err := BinDir(version)
	if err != nil {
		return nil, err
	}
	b := &Binaries{
		Dir:       dir,
		APIServer: filepath.Join(dir, "kube-apiserver"),
		Scheduler: filepath.Join(dir, "kube-scheduler"),
	}
	var missing []string
	for _, p := range []string{b.APIServer, b.Scheduler} {
		b.SearchedPaths = append(b.SearchedPaths, p)
		if !isExecutable(p) {
			missing = append(missing, p)
		}
	}
	if p := filepath.Join(dir, "etcd"); isExecutable(p) {
		b.Etcd = p
	} else if p, err := exec.LookPath("etcd"); err == nil {
		b.Etcd = p
	} else {
		missing = append(missing, "etcd (in "+dir+" or on $PATH)")
	}
	if len(missing) > 0 {
		return b, fmt.Errorf("k8senv: Kubernetes %s binaries missing: %s; build kube-apiserver and kube-scheduler with hack/k8s-bins.sh (slow the first time: it builds the kubelet and kube-controller-manager too; cached by version; GPUD_K8S_BINS overrides the cache dir) and install etcd with `apt-get install etcd-server`",
			version, strings.Join(missing, ", "))
	}
	if out, err := exec.Command(b.Etcd, "--version").Output(); err == nil {
		b.EtcdVersion, _, _ = strings.Cut(string(out), "\n")
	}
	return b, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
