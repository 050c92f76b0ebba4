package enforce

import (
	"fmt"
	"os"
	"strings"
)

// DefaultContainerLogsRoot is where the kubelet links each container's log
// as <pod>_<namespace>_<container>-<container-id>.log.
const DefaultContainerLogsRoot = "/var/log/containers"

// ContainerRef names a container.
type ContainerRef struct {
	Namespace, Pod, Container string
}

// ContainerLogs maps container IDs to names through the kubelet's
// container log links under Root (empty: [DefaultContainerLogsRoot]).
// The kubelet creates the link after the runtime created the container
// and before it starts it.
type ContainerLogs struct {
	Root string
}

// Containers returns the containers on the node by container ID.
func (c ContainerLogs) Containers() (map[string]ContainerRef, error) {
	root := c.Root
	if root == "" {
		root = DefaultContainerLogsRoot
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("enforce: read container log dir %s: %w (mount the kubelet's %s into the agent)", root, err, DefaultContainerLogsRoot)
	}
	out := make(map[string]ContainerRef, len(ents))
	for _, e := range ents {
		id, ref, ok := parseLogName(e.Name())
		if ok {
			out[id] = ref
		}
	}
	return out, nil
}

// parseLogName reads "<pod>_<namespace>_<container>-<64 hex>.log". Pod
// and namespace names cannot contain '_'; container names cannot either.
func parseLogName(name string) (string, ContainerRef, bool) {
	name, ok := strings.CutSuffix(name, ".log")
	if !ok {
		return "", ContainerRef{}, false
	}
	parts := strings.Split(name, "_")
	if len(parts) != 3 {
		return "", ContainerRef{}, false
	}
	i := strings.LastIndexByte(parts[2], '-')
	if i < 1 || len(parts[2])-i-1 != 64 {
		return "", ContainerRef{}, false
	}
	id := parts[2][i+1:]
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", ContainerRef{}, false
		}
	}
	return id, ContainerRef{Namespace: parts[1], Pod: parts[0], Container: parts[2][:i]}, true
}
