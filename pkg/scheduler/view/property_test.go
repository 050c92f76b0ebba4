package view

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// randomClaim is one claim of a random kind: whole GPUs (some on one NVLink
// domain), a memory(+cores) fraction, or a MIG slice by profile name.
func randomClaim(rng *rand.Rand, i int) *resourceapi.ResourceClaim {
	name := fmt.Sprint("c", i)
	switch rng.IntN(4) {
	case 0:
		c := claim(name, exact("gpus", "gpu.gpud.io", int64(1+rng.IntN(4))))
		if rng.IntN(2) == 0 {
			d := resourceapi.FullyQualifiedName("gpu.gpud.io/nvlinkDomain")
			c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: &d}}
		}
		return c
	case 1:
		cores := ""
		if rng.IntN(2) == 0 {
			cores = fmt.Sprint(5 * (1 + rng.IntN(12)))
		}
		return claim(name, fraction("gpu", fmt.Sprintf("%dMi", 256+rng.IntN(30<<10)), cores))
	case 2:
		profiles := []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"}
		return claim(name, migReq("mig", profiles[rng.IntN(len(profiles))]))
	default:
		return claim(name, fraction("gpu", fmt.Sprintf("%dGi", 1+rng.IntN(20)), ""))
	}
}

// TestPlaceNeverOverAllocates: random sequences of claims, placed with the
// gpud policy, written to claim status, re-read as used; claims are
// released at random. After every step the cluster passes Check and the
// independent oracle.
func TestPlaceNeverOverAllocates(t *testing.T) {
	base := newCluster(t)
	seeds := uint64(6)
	if testing.Short() {
		seeds = 2
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			c := &cluster{in: base.in, pub: base.pub}
			c.in.Claims = nil
			placed, failed := 0, 0
			for i := range 120 {
				if len(c.in.Claims) > 0 && rng.IntN(5) == 0 {
					k := rng.IntN(len(c.in.Claims))
					c.in.Claims = slices.Delete(slices.Clone(c.in.Claims), k, k+1)
				}
				v := c.build(t)
				allocs, err := place(t, v, Options{Rand: rng}, randomClaim(rng, i))
				if err != nil {
					if !errors.Is(err, ErrNoFit) {
						t.Fatalf("step %d: %v", i, err)
					}
					failed++
					continue
				}
				placed++
				c.commit(t, allocs)
				v = c.build(t)
				if err := Check(v); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if why := oracle(v, c.in.Claims); why != "" {
					t.Fatalf("step %d: oracle: %s", i, why)
				}
			}
			if placed < 40 {
				t.Fatalf("only %d of 120 placed (%d did not fit)", placed, failed)
			}
		})
	}
}

// oracle is an over-allocation check written independently of Check's
// counters: per GPU, the exclusive and shared uses of the whole device,
// the shares' memory and cores, and the MIG placements' memory slices
// (pairwise disjoint), compute slices (at most 7), media extensions (one
// "+me" profile per GPU) and exclusion of the
// whole GPU. It returns "" or what is wrong.
func oracle(v *View, claims []*resourceapi.ResourceClaim) string {
	type gpuUse struct {
		exclusive, shares int
		mem, cores        resource.Quantity
		slices            [MaxMIGSlices]int
		compute, migs     int
		media             int
		devices           map[string]int
	}
	use := map[gpuRef]*gpuUse{}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			n := v.Node(r.Pool)
			d := n.Devices[r.Device]
			k := gpuRef{r.Pool, d.GPU}
			u := use[k]
			if u == nil {
				u = &gpuUse{devices: map[string]int{}}
				use[k] = u
			}
			u.devices[r.Device]++
			switch {
			case d.MIG:
				u.migs++
				u.compute += d.ComputeSlices
				if strings.Contains(d.Profile, "+me") {
					u.media++
				}
				for s := d.Start; s < d.Start+d.Size; s++ {
					u.slices[s]++
				}
			case r.ShareID != nil:
				u.shares++
				u.mem.Add(r.ConsumedCapacity["memory"])
				u.cores.Add(r.ConsumedCapacity["cores"])
			default:
				u.exclusive++
			}
		}
	}
	for k, u := range use {
		g := v.Node(k.node).GPUs[k.gpu]
		for name, n := range u.devices {
			if n > 1 && (name != g.Whole || u.exclusive > 0) {
				return fmt.Sprintf("%s/%s allocated %d times", k.node, name, n)
			}
		}
		if u.mem.CmpInt64(g.MemoryBytes) > 0 || u.cores.CmpInt64(100) > 0 {
			return fmt.Sprintf("%s gpu %d: shares take %s memory and %s cores", k.node, g.Index, u.mem.String(), u.cores.String())
		}
		if u.migs > 0 && u.exclusive+u.shares > 0 {
			return fmt.Sprintf("%s gpu %d: MIG slices and the whole GPU", k.node, g.Index)
		}
		if u.media > 1 {
			return fmt.Sprintf("%s gpu %d: %d media-extension slices", k.node, g.Index, u.media)
		}
		if u.compute > 7 {
			return fmt.Sprintf("%s gpu %d: %d compute slices", k.node, g.Index, u.compute)
		}
		for s, n := range u.slices {
			if n > 1 {
				return fmt.Sprintf("%s gpu %d: memory slice %d taken %d times", k.node, g.Index, s, n)
			}
		}
	}
	return ""
}

// TestCheckAgreesWithOracle: random allocations of random devices of a
// node, valid or not; Check fails exactly when the oracle finds an
// over-allocation.
func TestCheckAgreesWithOracle(t *testing.T) {
	base := newCluster(t)
	v := base.build(t)
	n := v.Node("h100-a")
	names := make([]string, 0, len(n.Devices))
	for name := range n.Devices {
		names = append(names, name)
	}
	slices.Sort(names)
	rng := rand.New(rand.NewPCG(3, 4))
	bad := 0
	for i := range 400 {
		var claims []*resourceapi.ResourceClaim
		var allocs []*resourceapi.AllocationResult
		for j := range 1 + rng.IntN(6) {
			// Mostly one GPU, so collisions happen.
			name := names[rng.IntN(len(names))]
			if rng.IntN(3) > 0 {
				gpu1 := n.GPUs[1]
				all := append([]string{gpu1.Whole}, gpu1.MIG...)
				name = all[rng.IntN(len(all))]
			}
			d := n.Devices[name]
			r := resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: DriverName, Pool: n.Name, Device: name}
			if d.Shareable && rng.IntN(4) > 0 {
				id := types.UID(fmt.Sprint(i, "-", j))
				r.ShareID = &id
				r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
					"memory": *resource.NewQuantity(int64(1+rng.IntN(50))<<30, resource.BinarySI),
					"cores":  *resource.NewQuantity(int64(rng.IntN(60)), resource.DecimalSI),
				}
			}
			a := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{r}}}
			allocs = append(allocs, a)
			c := claim(fmt.Sprint("c", j))
			c.Status.Allocation = a
			claims = append(claims, c)
		}
		err := Check(v, allocs...)
		why := oracle(v, claims)
		if (err != nil) != (why != "") || (err != nil && !errors.Is(err, ErrOverAllocated)) {
			t.Fatalf("case %d: Check = %v, oracle = %q", i, err, why)
		}
		if why != "" {
			bad++
		}
	}
	if bad < 50 || bad > 350 {
		t.Fatalf("%d of 400 random cases over-allocate; the generator should give both kinds", bad)
	}
}
