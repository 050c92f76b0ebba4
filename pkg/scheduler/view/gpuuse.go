package view

// GPUUsedMilli is the milli-GPU the view's allocations take on each of n's
// GPUs, in n.GPUs order, as the allocator policy counts them: a whole GPU
// for an exclusive allocation or a MIG device in use, else the shares'
// largest consumed fraction (requested, not measured). n must be one of
// the view's nodes. The objectives' placement (pkg/scheduler/decide)
// reads it for a node's free GPUs and whether anything runs there.
func (v *View) GPUUsedMilli(n *Node) []int64 {
	out := make([]int64, len(n.GPUs))
	var binds []bind
	for g := range n.GPUs {
		binds = usedBinds(binds[:0], 0, n, g, false, v.usage, 0)
		for _, b := range binds {
			out[g] += b.r.GPUMilli
		}
	}
	return out
}
