package procattr

import (
	"fmt"
	"os"
	"strings"

	"github.com/gpud/gpud/pkg/usage"
)

// DefaultPodLogsRoot is where the kubelet keeps container logs, one
// directory per pod named <namespace>_<pod>_<uid>.
const DefaultPodLogsRoot = "/var/log/pods"

// PodRef names a pod: what a pod UID from [Resolver.Lookup] means (see
// [usage.PodRef]).
type PodRef = usage.PodRef

// PodLogs maps pod UIDs to names through the kubelet's pod log directories
// under Root (empty means [DefaultPodLogsRoot]). The kubelet creates one per
// pod on the node, named <namespace>_<name>_<uid>; namespaces and pod names
// cannot contain '_', so the split is unambiguous.
type PodLogs struct {
	Root string
}

// Pods returns the pods on the node by UID.
func (p PodLogs) Pods() (map[string]PodRef, error) {
	root := p.Root
	if root == "" {
		root = DefaultPodLogsRoot
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("procattr: read pod log dir %s: %w", root, err)
	}
	out := make(map[string]PodRef, len(ents))
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		parts := strings.Split(e.Name(), "_")
		if len(parts) != 3 || !isUID(parts[2]) {
			continue
		}
		out[parts[2]] = PodRef{Namespace: parts[0], Name: parts[1], UID: parts[2]}
	}
	return out, nil
}
