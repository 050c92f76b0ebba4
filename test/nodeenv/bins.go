package nodeenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gpud/gpud/test/k8senv"
)

// ContainerdVersion is the containerd release hack/node-bins.sh builds
// unless GPUD_CONTAINERD_VERSION says otherwise (TestScriptBuildsVersion
// keeps the two in step).
const ContainerdVersion = "v2.2.9"

// CNIDirs are where the CNI plugins are looked for: Debian's
// containernetworking-plugins, then the upstream default.
var CNIDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// Binaries are the executables a node runs.
type Binaries struct {
	KubeDir           string // <root>/<kube version>: kubelet, kube-controller-manager
	ContainerdDir     string // <root>/containerd-<version>: containerd, ctr, containerd-shim-runc-v2
	Kubelet           string
	ControllerManager string
	Containerd        string
	Ctr               string
	Shim              string
	Runc              string // Debian's runc
	CNIDir            string // the directory holding the bridge, host-local and loopback plugins
	Unshare, Nsenter  string // util-linux
}

// BinRoot is where hack/node-bins.sh puts (and this package looks for) the
// node's binaries: $GPUD_NODE_BINS, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/gpud/node-bins.
func BinRoot() (string, error) {
	if root := os.Getenv("GPUD_NODE_BINS"); root != "" {
		return root, nil
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("nodeenv: neither GPUD_NODE_BINS, XDG_CACHE_HOME nor HOME is set: %w", err)
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "gpud", "node-bins"), nil
}

// FindBinaries looks the node's binaries up: the kubelet,
// kube-controller-manager and containerd in BinRoot's versioned
// directories, runc, unshare and nsenter on $PATH (and in /usr/sbin, where
// Debian puts runc), the CNI plugins in CNIDirs. The error names every
// missing piece and how to get it.
func FindBinaries() (*Binaries, error) {
	root, err := BinRoot()
	if err != nil {
		return nil, err
	}
	cver := os.Getenv("GPUD_CONTAINERD_VERSION")
	if cver == "" {
		cver = ContainerdVersion
	}
	b := &Binaries{
		KubeDir:       filepath.Join(root, k8senv.KubeVersion()),
		ContainerdDir: filepath.Join(root, "containerd-"+cver),
	}
	b.Kubelet = filepath.Join(b.KubeDir, "kubelet")
	b.ControllerManager = filepath.Join(b.KubeDir, "kube-controller-manager")
	b.Containerd = filepath.Join(b.ContainerdDir, "containerd")
	b.Ctr = filepath.Join(b.ContainerdDir, "ctr")
	b.Shim = filepath.Join(b.ContainerdDir, "containerd-shim-runc-v2")
	var missing []string
	for _, p := range []string{b.Kubelet, b.ControllerManager, b.Containerd, b.Ctr, b.Shim} {
		if !isExecutable(p) {
			missing = append(missing, p+" (hack/node-bins.sh)")
		}
	}
	look := func(name, pkg string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin"} {
			if p := filepath.Join(dir, name); isExecutable(p) {
				return p
			}
		}
		missing = append(missing, name+" (apt-get install "+pkg+")")
		return ""
	}
	b.Runc = look("runc", "runc")
	b.Unshare = look("unshare", "util-linux")
	b.Nsenter = look("nsenter", "util-linux")
	for _, dir := range CNIDirs {
		if isExecutable(filepath.Join(dir, "bridge")) && isExecutable(filepath.Join(dir, "loopback")) && isExecutable(filepath.Join(dir, "host-local")) {
			b.CNIDir = dir
			break
		}
	}
	if b.CNIDir == "" {
		missing = append(missing, "CNI plugins bridge, host-local, loopback in "+strings.Join(CNIDirs, " or ")+" (apt-get install containernetworking-plugins)")
	}
	if len(missing) > 0 {
		return b, fmt.Errorf("nodeenv: node binaries missing: %s", strings.Join(missing, ", "))
	}
	return b, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
