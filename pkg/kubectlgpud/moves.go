package kubectlgpud

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/scheduler/view"
)

// maxMoves bounds the pods a move suggestion lists.
const maxMoves = 8

// holders maps each GPU to the pods (namespace/name; the claim when no pod
// reserves it) whose allocations sit on it, whole or MIG or fraction.
func holders(v *view.View, claims []*resourceapi.ResourceClaim) map[gpuKey][]string {
	out := map[gpuKey][]string{}
	for c := range view.LatestAllocated(claims) {
		var who []string
		for _, r := range c.Status.ReservedFor {
			if r.Resource == "pods" {
				who = append(who, c.Namespace+"/"+r.Name)
			}
		}
		if len(who) == 0 {
			who = []string{c.Namespace + "/claim " + c.Name}
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			n := v.Node(r.Pool)
			if r.Driver != view.DriverName || n == nil || n.Devices[r.Device] == nil {
				continue
			}
			k := gpuKey{r.Pool, n.GPUs[n.Devices[r.Device].GPU].Index}
			for _, w := range who {
				if !slices.Contains(out[k], w) {
					out[k] = append(out[k], w)
				}
			}
		}
	}
	return out
}

// movesFor says which pods would have to move for count whole GPUs to be
// free on one node: on each node with count healthy GPUs outside MIG mode,
// pods are taken greedily (the one freeing the most GPUs first; a GPU is
// free once every pod on it moved), and the node needing the fewest is
// named. "" when no node has count such GPUs or count are free already.
func movesFor(v *view.View, held map[gpuKey][]string, count int) string {
	best, bestNode := []string(nil), ""
	var bestGPUs map[string][]int
	for _, n := range v.Nodes() {
		var busy []int
		eligible := 0
		for _, g := range n.GPUs {
			d := n.Devices[g.Whole]
			if d == nil || len(badTaints(d.Taints)) > 0 || hasExistingMIG(n, g) {
				continue
			}
			eligible++
			if len(held[gpuKey{n.Name, g.Index}]) > 0 {
				busy = append(busy, g.Index)
			}
		}
		deficit := count - (eligible - len(busy))
		if eligible < count || deficit <= 0 {
			continue
		}
		moved, gpus := greedyMoves(n.Name, busy, held, deficit)
		if moved == nil {
			continue
		}
		if best == nil || len(moved) < len(best) {
			best, bestNode, bestGPUs = moved, n.Name, gpus
		}
	}
	if best == nil {
		return ""
	}
	parts := make([]string, 0, len(best))
	for i, p := range best {
		if i == maxMoves {
			parts = append(parts, fmt.Sprintf("and %d more", len(best)-maxMoves))
			break
		}
		gs := bestGPUs[p]
		idx := make([]string, len(gs))
		for j, g := range gs {
			idx[j] = itoa(g)
		}
		parts = append(parts, fmt.Sprintf("%s (%s %s)", p, plural(len(gs), "gpu", "gpus"), strings.Join(idx, ",")))
	}
	return fmt.Sprintf("it would fit on %s if %d %s moved: %s", bestNode, len(best), plural(len(best), "pod", "pods"), strings.Join(parts, ", "))
}

// greedyMoves picks pods on node until deficit busy GPUs are free; it
// returns them in the order picked and the GPUs each is on, or nil when
// moving every pod frees too few.
func greedyMoves(node string, busy []int, held map[gpuKey][]string, deficit int) ([]string, map[string][]int) {
	on := map[string][]int{}
	for _, g := range busy {
		for _, p := range held[gpuKey{node, g}] {
			on[p] = append(on[p], g)
		}
	}
	moved := map[string]bool{}
	freed := func() int {
		n := 0
		for _, g := range busy {
			if !slices.ContainsFunc(held[gpuKey{node, g}], func(p string) bool { return !moved[p] }) {
				n++
			}
		}
		return n
	}
	var order []string
	pods := slices.Sorted(maps.Keys(on))
	for freed() < deficit && len(order) < len(pods) {
		pick, pickFreed := "", -1
		for _, p := range pods {
			if moved[p] {
				continue
			}
			moved[p] = true
			f := freed()
			moved[p] = false
			if f > pickFreed || (f == pickFreed && cmp.Compare(len(on[p]), len(on[pick])) > 0) {
				pick, pickFreed = p, f
			}
		}
		moved[pick] = true
		order = append(order, pick)
	}
	if freed() < deficit {
		return nil, nil
	}
	return order, on
}

// hasExistingMIG says whether a GPU has MIG devices that exist (MIG mode
// on with slices): turning it into a whole GPU is a layout change, not a
// move.
func hasExistingMIG(n *view.Node, g view.GPU) bool {
	for _, name := range g.MIG {
		if d := n.Devices[name]; d != nil {
			if _, ok := d.Attributes["uuid"]; ok {
				return true
			}
		}
	}
	return false
}
