package extres

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Option is how a pod's DRA-backed extended resources are served on a set
// of nodes.
type Option struct {
	// Nodes are the nodes this option holds on, sorted.
	Nodes []string
	// Claim is the claim for the resources these nodes serve through DRA
	// (only those: its requests and mappings cover no resource a device
	// plugin serves here); nil when device plugins serve them all.
	Claim *Claim
	// Plugin are the resources these nodes serve through a device plugin,
	// with the pod's request of each (init containers: the largest, as
	// kube-scheduler's NodeResourcesFit counts them); nil when none.
	Plugin corev1.ResourceList
}

// PerNode decides, node by node as kube-scheduler v1.37 does, how pod's
// extended resources backed by DRA are served: a node whose allocatable
// lists a resource (a device plugin advertises it) serves it there, and
// NodeResourcesFit counts it against the allocatable; on a node whose
// allocatable lacks it (or lists 0) the DeviceClass serves it through the
// pod's extended-resource claim, whose requests then cover only such
// resources (kube-scheduler's filterExtendedResources). Nodes that serve
// the pod alike form one option; options asking DRA for more resources
// come first (then by the resources' names), the one with device plugins
// only last.
//
// It returns nil when For's claim holds on every node: the pod asks for
// no such resource, no node advertises one through a device plugin, or
// the pod's claim was written in an earlier attempt (existing: it is
// reused as written, so the pod goes where DRA serves what it asks).
func PerNode(pod *corev1.Pod, r Resolver, existing *resourceapi.ResourceClaim, nodes []*corev1.Node) []Option {
	backed := backedBy(pod, r)
	if len(backed) == 0 || existing != nil {
		return nil
	}
	want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	names := slices.Sorted(maps.Keys(backed))
	byKey := map[string]*Option{}
	dra := map[string][]corev1.ResourceName{}
	var keys []string
	for _, n := range nodes {
		if n == nil {
			continue
		}
		var viaDRA []corev1.ResourceName
		for _, name := range names {
			if q, ok := n.Status.Allocatable[name]; !ok || q.Sign() <= 0 {
				viaDRA = append(viaDRA, name)
			}
		}
		key := joinNames(viaDRA)
		o := byKey[key]
		if o == nil {
			o = &Option{}
			byKey[key], dra[key] = o, viaDRA
			keys = append(keys, key)
		}
		o.Nodes = append(o.Nodes, n.Name)
	}
	if len(keys) == 0 || (len(keys) == 1 && len(dra[keys[0]]) == len(names)) {
		return nil
	}
	// Options asking DRA for more first (gpud's policy places those), by
	// what they ask; device plugins only last.
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(len(dra[b]), len(dra[a])); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	out := make([]Option, 0, len(keys))
	for _, key := range keys {
		o := byKey[key]
		slices.Sort(o.Nodes)
		sub := map[corev1.ResourceName]*resourceapi.DeviceClass{}
		for _, name := range dra[key] {
			sub[name] = backed[name]
		}
		o.Claim = forResources(pod, sub, nil)
		for _, name := range names {
			if _, viaDRA := sub[name]; viaDRA {
				continue
			}
			if o.Plugin == nil {
				o.Plugin = corev1.ResourceList{}
			}
			o.Plugin[name] = want[name]
		}
		out = append(out, *o)
	}
	return out
}

// PluginDevices counts the devices a pod bound to node holds through
// device plugins among its DRA-backed extended resources: those node's
// allocatable lists (the rest its extended-resource claim holds).
func PluginDevices(pod *corev1.Pod, r Resolver, node *corev1.Node) int64 {
	if node == nil {
		return 0
	}
	backed := backedBy(pod, r)
	if len(backed) == 0 {
		return 0
	}
	want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	n := int64(0)
	for name := range backed {
		if q, ok := node.Status.Allocatable[name]; ok && q.Sign() > 0 {
			n += want.Name(name, "").Value()
		}
	}
	return n
}

// Count sums a resource list's values (device counts).
func Count(l corev1.ResourceList) int64 {
	n := int64(0)
	for _, q := range l {
		n += q.Value()
	}
	return n
}

func joinNames(names []corev1.ResourceName) string {
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(string(n))
	}
	return b.String()
}

// NeverFits says why no node of o could ever serve the resources o's pod
// asks through device plugins, even with nothing else on it ("" if one
// could, or o asks none): a resource more than every node's allocatable
// of it, or no node with enough of all of them at once. nodes are looked
// up by o.Nodes' names; unknown names are skipped.
func NeverFits(o Option, nodes []*corev1.Node) string {
	if len(o.Plugin) == 0 {
		return ""
	}
	in := make(map[string]bool, len(o.Nodes))
	for _, n := range o.Nodes {
		in[n] = true
	}
	names := slices.Sorted(maps.Keys(o.Plugin))
	most := make(map[corev1.ResourceName]int64, len(names))
	served := 0
	for _, n := range nodes {
		if n == nil || !in[n.Name] {
			continue
		}
		served++
		all := true
		for _, name := range names {
			q := n.Status.Allocatable[name]
			most[name] = max(most[name], q.Value())
			all = all && q.Value() >= o.Plugin.Name(name, "").Value()
		}
		if all {
			return ""
		}
	}
	if served == 0 {
		return ""
	}
	for _, name := range names {
		if want := o.Plugin.Name(name, "").Value(); want > most[name] {
			return fmt.Sprintf("never fits: the pod asks %d %s through a device plugin; the most any of the %d nodes serving it that way has allocatable is %d",
				want, name, served, most[name])
		}
	}
	return fmt.Sprintf("never fits: no node of the %d serving %s through a device plugin has allocatable for all the pod asks of them at once",
		served, joinNames(names))
}
