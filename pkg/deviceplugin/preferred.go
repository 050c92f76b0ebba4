package deviceplugin

import (
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpud/gpud/pkg/topology"
)

// GetPreferredAllocation picks, for each container, the devices it should
// get: whole GPUs by interconnect through pkg/topology; MIG slices and
// replicas packed onto as few GPUs as possible, onto GPUs already in use
// before untouched ones.
func (p *plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	set, _ := p.snapshot()
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		ids, err := preferred(set, c.AvailableDeviceIDs, c.MustIncludeDeviceIDs, int(c.AllocationSize))
		if err != nil {
			p.log.Warn("preferred allocation refused", "err", err)
			return nil, err
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// preferred chooses size devices out of available, including must.
func preferred(set *deviceSet, available, must []string, size int) ([]string, error) {
	for _, id := range append(slices.Clip(available), must...) {
		if _, ok := set.byID[id]; !ok {
			return nil, status.Errorf(codes.InvalidArgument, "%s: unknown device %q in preferred allocation request", set.resource, id)
		}
	}
	for _, id := range must {
		if !slices.Contains(available, id) {
			return nil, status.Errorf(codes.InvalidArgument, "%s: must-include device %q is not available", set.resource, id)
		}
	}
	if size <= 0 || size > len(available) || size < len(must) {
		return nil, status.Errorf(codes.InvalidArgument, "%s: allocation size %d with %d available and %d must-include devices", set.resource, size, len(available), len(must))
	}
	if !set.grouped {
		ids, err := set.matrix.Choose(available, size, must)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "%s: %v", set.resource, err)
		}
		return ids, nil
	}
	return packGroups(set, available, must, size), nil
}

// packGroups fills a request from groups (replicas of one unit, MIG slices
// of one GPU): the must-include devices' groups first, then a group that
// fits the rest (busy before untouched, then the tightest fit), else the
// largest busy group, so that whole GPUs stay free. Ties go to the group
// closest by interconnect to the groups already chosen, then to device
// order.
func packGroups(set *deviceSet, available, must []string, size int) []string {
	free := map[string][]string{} // group -> available IDs in device order
	var order []string            // groups in device order
	avail := map[string]bool{}
	for _, id := range available {
		avail[id] = true
	}
	for _, d := range set.devices {
		if !avail[d.ID] {
			continue
		}
		g := d.group()
		if _, ok := free[g]; !ok {
			order = append(order, g)
		}
		free[g] = append(free[g], d.ID)
	}
	chosen := make([]string, 0, size)
	taken := map[string]bool{}
	usedGroups := map[string]bool{}
	var usedGPUs []string
	take := func(id string) {
		if taken[id] || len(chosen) == size {
			return
		}
		taken[id] = true
		chosen = append(chosen, id)
		d := set.byID[id]
		if g := d.group(); !usedGroups[g] {
			usedGroups[g] = true
			usedGPUs = append(usedGPUs, d.GPU)
		}
	}
	for _, id := range must {
		take(id)
	}
	for _, g := range order {
		if usedGroups[g] {
			for _, id := range free[g] {
				take(id)
			}
		}
	}
	for len(chosen) < size {
		need := size - len(chosen)
		best := ""
		var bestKey groupKey
		for _, g := range order {
			if usedGroups[g] {
				continue
			}
			n := len(free[g])
			gpuID := set.byID[free[g][0]].GPU
			k := groupKey{
				fits:  n >= need,
				busy:  n < set.groupSize[g],
				size:  n,
				links: linkCost(set.matrix, gpuID, usedGPUs),
			}
			if best == "" || k.better(bestKey) {
				best, bestKey = g, k
			}
		}
		for _, id := range free[best] {
			take(id)
		}
	}
	return chosen
}

// groupKey ranks candidate groups for packGroups.
type groupKey struct {
	fits  bool // holds the whole remaining request
	busy  bool // some of its devices are already allocated
	size  int  // available devices
	links int  // interconnect cost to the groups already chosen
}

func (a groupKey) better(b groupKey) bool {
	if a.fits != b.fits {
		return a.fits
	}
	if a.busy != b.busy {
		return a.busy
	}
	if a.size != b.size {
		if a.fits {
			return a.size < b.size // tightest fit keeps bigger groups whole
		}
		return a.size > b.size // fewest groups when nothing fits
	}
	return a.links < b.links
}

// linkCost is the interconnect cost from one GPU to a set of GPUs.
func linkCost(m *topology.Matrix, gpuID string, to []string) int {
	c := 0
	for _, o := range to {
		if l, ok := m.Link(gpuID, o); ok {
			c += topology.LinkCost(l)
		}
	}
	return c
}
