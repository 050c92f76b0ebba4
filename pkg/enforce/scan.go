package enforce

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpud/gpud/pkg/procattr"
)

// container is one container cgroup found in the pod cgroup tree.
type container struct {
	rel         string // path inside the hierarchy, starting with "/"
	podUID      string
	containerID string
	guaranteed  bool // no burstable or besteffort QoS level in the path
}

// maxDepth bounds the walk below a kubepods root: QoS, pod, container
// (systemd adds nothing deeper).
const maxDepth = 4

// scan walks the kubepods trees under root (cgroupfs "kubepods", systemd
// "kubepods.slice") and returns the container cgroups by rel path. The
// trees are root's kubepods* children and those one level further down,
// where a kubelet with a cgroupRoot (--cgroup-root /kubelet, say) puts
// them. A root that does not exist gives none.
func scan(root string) (map[string]container, error) {
	out := map[string]container{}
	tops, err := kubepodsTops(root)
	if err != nil {
		return nil, err
	}
	for _, top := range tops {
		err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // removed while walking
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			rel := "/" + strings.TrimPrefix(filepath.ToSlash(strings.TrimPrefix(p, root)), "/")
			if strings.Count(strings.TrimPrefix(p, top), string(filepath.Separator)) > maxDepth {
				return fs.SkipDir
			}
			c, ok := procattr.ParsePath(rel)
			if !ok || !strings.HasSuffix(strings.TrimSuffix(rel, ".scope"), c.ContainerID) {
				return nil
			}
			low := strings.ToLower(rel)
			out[rel] = container{rel: rel, podUID: c.PodUID, containerID: c.ContainerID,
				guaranteed: !strings.Contains(low, "burstable") && !strings.Contains(low, "besteffort")}
			return fs.SkipDir
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// kubepodsTops are the kubepods* directories among root's children and
// their children.
func kubepodsTops(root string) ([]string, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var tops []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if strings.HasPrefix(e.Name(), "kubepods") {
			tops = append(tops, dir)
			continue
		}
		sub, err := os.ReadDir(dir)
		if err != nil {
			continue // removed meanwhile, or not ours to read: no pods there
		}
		for _, s := range sub {
			if s.IsDir() && strings.HasPrefix(s.Name(), "kubepods") {
				tops = append(tops, filepath.Join(dir, s.Name()))
			}
		}
	}
	return tops, nil
}
