package dra

import (
	"fmt"
	"slices"
	"strings"
)

// checkClaimFits refuses a claim that asks for more of one GPU than the GPU
// has: the GPU whole together with any other device of it (a fraction, a
// second whole share, a MIG slice), or fractions whose memory or cores sum
// past the GPU's. [Preparer.checkConflicts] checks a claim against the
// others; this checks it against itself, before anything is saved, so a
// refused claim leaves the checkpoint and the CDI dir as they were.
func checkClaimFits(devs []PreparedDevice) error {
	type gpuUse struct {
		name, uuid     string
		memoryBytes    uint64 // the GPU's
		wholeRequests  []string
		otherRequests  []string // fractions and MIG slices
		fracRequests   []string
		fracMemory     uint64
		fracCores      int
		devicesOfClaim int
	}
	var order []string
	uses := map[string]*gpuUse{}
	for _, d := range devs {
		u := uses[d.Device.GPUUUID]
		if u == nil {
			u = &gpuUse{uuid: d.Device.GPUUUID}
			uses[d.Device.GPUUUID] = u
			order = append(order, d.Device.GPUUUID)
		}
		u.devicesOfClaim++
		switch {
		case d.Device.Type != TypeGPU:
			u.otherRequests = append(u.otherRequests, d.Requests...)
		case d.Fraction():
			u.name, u.memoryBytes = d.Device.Name, d.Device.MemoryBytes
			u.otherRequests = append(u.otherRequests, d.Requests...)
			u.fracRequests = append(u.fracRequests, d.Requests...)
			u.fracMemory += d.MemoryBytes
			u.fracCores += d.CoresPercent
		default:
			u.name, u.memoryBytes = d.Device.Name, d.Device.MemoryBytes
			u.wholeRequests = append(u.wholeRequests, d.Requests...)
		}
	}
	for _, id := range order {
		u := uses[id]
		if len(u.wholeRequests) > 0 && u.devicesOfClaim > 1 {
			others := slices.Concat(u.wholeRequests[1:], u.otherRequests)
			return fmt.Errorf("%w: GPU %q (%s) is held whole by request %s and also by %s; ask for the whole GPU once, or for fractions of it only",
				ErrClaimExceedsGPU, u.name, u.uuid, quoteList(u.wholeRequests[:1]), quoteList(others))
		}
		if len(u.fracRequests) == 0 {
			continue
		}
		if u.fracMemory > u.memoryBytes {
			return fmt.Errorf("%w: fractions of GPU %q (%s) for requests %s sum to %s of memory, and the GPU has %s; ask for at most %s in total from one GPU",
				ErrClaimExceedsGPU, u.name, u.uuid, quoteList(u.fracRequests), gib(u.fracMemory), gib(u.memoryBytes), gib(u.memoryBytes))
		}
		if u.fracCores > 100 {
			return fmt.Errorf("%w: fractions of GPU %q (%s) for requests %s sum to %d%% of its cores; ask for at most 100%% in total from one GPU",
				ErrClaimExceedsGPU, u.name, u.uuid, quoteList(u.fracRequests), u.fracCores)
		}
	}
	return nil
}

// gib formats a byte count for a person, rounded to two decimals, with the
// exact count: "80 GiB (85899345920 bytes)", "60.5 GiB (64961380352 bytes)".
func gib(b uint64) string {
	return fmt.Sprintf("%s GiB (%d bytes)", strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", float64(b)/(1<<30)), "0"), "."), b)
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
