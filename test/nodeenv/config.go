package nodeenv

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// containerdConfig is containerd's config (version 3, containerd 2.x) for
// the node: state under the namespace's /var/lib and /run, CDI on with
// specs read from /var/run/cdi (where gpud writes them; /etc/cdi is the
// host's and left alone), NRI on at its default socket, Debian's runc with
// the cgroupfs driver and its shims in shimCgroup, CNI from cniDir with confDir, the imported pause
// image as the sandbox. restrict_oom_score_adj keeps containerd from
// lowering OOM scores, which a sandbox without CAP_SYS_RESOURCE refuses.
func containerdConfig(runc, cniDir, confDir, shimCgroup string) string {
	return fmt.Sprintf(`version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %q

  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    enable_cdi = true
    cdi_spec_dirs = ["/var/run/cdi"]
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %q
          SystemdCgroup = false
          ShimCgroup = %q
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%q]
      conf_dir = %q

  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    socket_path = "/var/run/nri/nri.sock"
`, PauseImage, runc, shimCgroup, cniDir, confDir)
}

// PodSubnet is the node's pod network (the CNI bridge's, TEST-NET-2), and
// PodGateway the bridge's own address in it: the host as a pod that is not
// on the host network reaches it (pods have no default route), so a server
// on the host that listens on every address (k8senv.WithPodAPIAccess) is
// reachable from pods there.
const (
	PodSubnet  = "198.51.100.0/24"
	PodGateway = "198.51.100.1"
)

// cniConfig is a bridge network on a bridge of the node's own with a
// TEST-NET-2 range, for pods without host network (the shipped
// DaemonSets): the bridge holds the gateway address, so the kubelet's
// probes reach the pods over it, but the pods get no default route: their
// traffic stays on this machine. Node.stop removes the bridge.
func cniConfig(bridge string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "nodeenv",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "isDefaultGateway": false, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": "/var/lib/cni/networks"}},
    {"type": "loopback"}
  ]
}
`, bridge, PodSubnet)
}

// kubeletConfig is the kubelet's KubeletConfiguration: it serves on
// 127.0.0.1 (ports, from the caller, free), with the cgroupfs driver under
// cgroupRoot (failCgroupV1 off, for hybrid hosts), containerd at its
// socket in the namespace, no DNS, status reported every second so tests
// see allocatable changes quickly, and eviction and image GC that never
// act on a shared disk.
func kubeletConfig(port, healthzPort int, cgroupRoot string, gates map[string]bool) string {
	var g strings.Builder
	names := make([]string, 0, len(gates))
	for k := range gates {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&g, "  %s: %t\n", k, gates[k])
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: %s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
resolvConf: ""
nodeStatusUpdateFrequency: 1s
nodeStatusReportFrequency: 1s
syncFrequency: 5s
fileCheckFrequency: 5s
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
shutdownGracePeriod: 0s
featureGates:
%s`, port, healthzPort, cgroupRoot, g.String())
}

// writeFile writes content to path, creating its directory.
func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("nodeenv: %w", err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return fmt.Errorf("nodeenv: %w", err)
	}
	return nil
}
