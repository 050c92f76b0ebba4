package kubectlgpud

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/gpud/gpud/pkg/scheduler/view"
)

// Sources of a node's GPUs.
const (
	SourceDRA          = "dra"
	SourceDevicePlugin = "device-plugin"
)

// GFD's node labels that the plugin reads (pkg/nodelabels).
const (
	labelProduct = "nvidia.com/gpu.product"
	labelCount   = "nvidia.com/gpu.count"
)

// NodeInfo is one node's GPUs and who uses them.
type NodeInfo struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	Model  string `json:"model,omitempty"`
	// GPUs counts physical GPUs (DRA) or the GPU resource's capacity
	// (device plugin).
	GPUs int `json:"gpus"`
	// FreeGPUs counts GPUs nothing is allocated on (no whole-GPU, MIG or
	// fraction allocation) and that are healthy.
	FreeGPUs int `json:"freeGPUs"`
	// MIG lists MIG profiles present (DRA: existing MIG devices and
	// allocated placements; device plugin: nvidia.com/mig-* resources).
	MIG []MIGUse `json:"mig,omitempty"`
	// Shared lists GPUs holding fractions (DRA) or time-sliced replicas
	// (device plugin, nvidia.com/gpu.shared).
	Shared []SharedUse `json:"shared,omitempty"`
	// Unhealthy lists devices kept off by a taint (DRA) or unhealthy
	// devices (device plugin: capacity above allocatable).
	Unhealthy []string `json:"unhealthy,omitempty"`
}

// MIGUse is a MIG profile on a node: how many slices exist and how many
// are allocated.
type MIGUse struct {
	Profile string `json:"profile"`
	Present int    `json:"present"`
	Used    int    `json:"used"`
}

// SharedUse is one shared GPU (DRA fractions: memory) or a node's
// time-sliced replicas (device plugin: Replicas).
type SharedUse struct {
	// GPU is the GPU index; -1 for a device plugin's replicas.
	GPU         int   `json:"gpu"`
	Shares      int   `json:"shares"`
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	UsedBytes   int64 `json:"usedBytes,omitempty"`
	// Replicas is the replicas a device plugin advertises.
	Replicas int `json:"replicas,omitempty"`
}

// Nodes is every node with GPUs: DRA nodes from gpud's ResourceSlices and
// the claims allocated from them, device-plugin nodes from their
// allocatable resources under prefix (nvidia.com) and the pods bound to
// them. Sorted by name.
func Nodes(s *Snapshot, prefix string) []NodeInfo {
	v := buildView(s)
	u := newUsage(v, s.Claims)
	var out []NodeInfo
	dra := map[string]bool{}
	for _, n := range v.Nodes() {
		if len(n.GPUs) == 0 {
			continue
		}
		dra[n.Name] = true
		out = append(out, draNode(n, u))
	}
	requested := podRequestsByNode(s.Pods)
	for _, kn := range s.Nodes {
		if dra[kn.Name] {
			continue
		}
		if ni, ok := pluginNode(kn, prefix, requested[kn.Name]); ok {
			out = append(out, ni)
		}
	}
	slices.SortFunc(out, func(a, b NodeInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func draNode(n *view.Node, u usage) NodeInfo {
	ni := NodeInfo{Name: n.Name, Source: SourceDRA, GPUs: len(n.GPUs)}
	models := map[string]bool{}
	mig := map[string]*MIGUse{}
	for _, g := range n.GPUs {
		if g.Model != "" && !models[g.Model] {
			models[g.Model] = true
			ni.Model = joinNonEmpty(ni.Model, g.Model, ", ")
		}
		busy := u.byGPU[gpuKey{n.Name, g.Index}] > 0
		var bad []string
		if d := n.Devices[g.Whole]; d != nil {
			bad = append(bad, badTaints(d.Taints)...)
			if du := u.dev[devKey{n.Name, d.Name}]; du != nil && du.exclusive == 0 && du.memoryBytes < g.MemoryBytes {
				ni.Shared = append(ni.Shared, SharedUse{GPU: g.Index, Shares: du.shares, MemoryBytes: g.MemoryBytes, UsedBytes: du.memoryBytes})
			}
		}
		migOn := g.Whole == ""
		for _, name := range g.MIG {
			d := n.Devices[name]
			if d == nil {
				continue
			}
			used := u.dev[devKey{n.Name, name}] != nil
			_, exists := d.Attributes["uuid"]
			if !used && !exists {
				continue // a placement the driver would create on demand
			}
			if exists {
				migOn = true
			}
			m := mig[d.Profile]
			if m == nil {
				m = &MIGUse{Profile: d.Profile}
				mig[d.Profile] = m
			}
			m.Present++
			if used {
				m.Used++
			}
			if t := badTaints(d.Taints); len(t) > 0 && g.Whole == "" && len(bad) == 0 {
				bad = append(bad, name+" "+strings.Join(t, ","))
			}
		}
		if len(bad) > 0 {
			ni.Unhealthy = append(ni.Unhealthy, "gpu "+itoa(g.Index)+" "+strings.Join(dedupe(bad), ","))
		}
		if !busy && !migOn && len(bad) == 0 {
			ni.FreeGPUs++
		}
	}
	for _, m := range mig {
		ni.MIG = append(ni.MIG, *m)
	}
	slices.SortFunc(ni.MIG, func(a, b MIGUse) int { return cmp.Compare(a.Profile, b.Profile) })
	return ni
}

// pluginNode reads a device-plugin node; ok is false for a node without
// the GPU resources.
func pluginNode(kn *corev1.Node, prefix string, requested corev1.ResourceList) (NodeInfo, bool) {
	gpuRes := corev1.ResourceName(prefix + "/gpu")
	sharedRes := corev1.ResourceName(prefix + "/gpu.shared")
	migPrefix := prefix + "/mig-"
	ni := NodeInfo{Name: kn.Name, Source: SourceDevicePlugin, Model: kn.Labels[labelProduct]}
	found := false
	for name, alloc := range kn.Status.Allocatable {
		capq, hasCap := kn.Status.Capacity[name]
		if !hasCap {
			capq = alloc
		}
		req := requested[name]
		switch {
		case name == gpuRes:
			found = true
			ni.GPUs = int(capq.Value())
			ni.FreeGPUs = max(0, int(alloc.Value()-req.Value()))
			if d := capq.Value() - alloc.Value(); d > 0 {
				ni.Unhealthy = append(ni.Unhealthy, itoa(int(d))+" "+string(name)+" unhealthy")
			}
		case name == sharedRes:
			found = true
			ni.Shared = append(ni.Shared, SharedUse{GPU: -1, Shares: int(req.Value()), Replicas: int(alloc.Value())})
		case strings.HasPrefix(string(name), migPrefix):
			found = true
			ni.MIG = append(ni.MIG, MIGUse{Profile: strings.TrimPrefix(string(name), migPrefix), Present: int(capq.Value()), Used: int(req.Value())})
			if d := capq.Value() - alloc.Value(); d > 0 {
				ni.Unhealthy = append(ni.Unhealthy, itoa(int(d))+" "+string(name)+" unhealthy")
			}
		}
	}
	if !found {
		return NodeInfo{}, false
	}
	if ni.GPUs == 0 {
		if c, err := atoiBounded(kn.Labels[labelCount]); err == nil {
			ni.GPUs = c
		}
	}
	slices.SortFunc(ni.MIG, func(a, b MIGUse) int { return cmp.Compare(a.Profile, b.Profile) })
	slices.Sort(ni.Unhealthy)
	return ni, true
}

// podRequestsByNode sums the resource requests of the pods bound to each
// node that have not finished, as the kubelet admits them.
func podRequestsByNode(pods []*corev1.Pod) map[string]corev1.ResourceList {
	out := map[string]corev1.ResourceList{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || terminal(p) {
			continue
		}
		sum := out[p.Spec.NodeName]
		if sum == nil {
			sum = corev1.ResourceList{}
			out[p.Spec.NodeName] = sum
		}
		for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
			cur := sum[name]
			cur.Add(q)
			sum[name] = cur
		}
	}
	return out
}

func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
