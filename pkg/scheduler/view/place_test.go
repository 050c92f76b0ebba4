package view

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/pkg/allocator"
)

// place demands and places claims on v and returns the allocations.
func place(t testing.TB, v *View, opt Options, claims ...*resourceapi.ResourceClaim) ([]Allocation, error) {
	t.Helper()
	items, _, err := v.Demand(claims)
	if err != nil {
		return nil, err
	}
	return v.Place(items, opt)
}

// commit writes allocations into the cluster's claims, as the API server
// would hold them, so the next Build sees them as used.
func (c *cluster) commit(t testing.TB, allocs []Allocation) {
	t.Helper()
	for _, a := range allocs {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + a.Claim.Name, UID: types.UID("pod-uid-" + a.Claim.Name)}}
		st, err := a.Status(pod, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		c.in.Claims = append(c.in.Claims, st)
	}
}

func TestPlace(t *testing.T) {
	domain := resourceapi.FullyQualifiedName("gpu.gpud.io/nvlinkDomain")
	numa := resourceapi.FullyQualifiedName("gpu.gpud.io/numaNode")
	withMatch := func(c *resourceapi.ResourceClaim, attr resourceapi.FullyQualifiedName) *resourceapi.ResourceClaim {
		c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{c.Spec.Devices.Requests[0].Name}, MatchAttribute: &attr}}
		return c
	}
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		node  string   // "" any
		want  []string // device name patterns (prefix) per result
		// consumed memory of the first result, if shared
		memory string
	}{
		{name: "whole GPU", claim: claim("w", exact("gpu", "gpu.gpud.io", 1)), want: []string{"gpu-"}},
		{name: "four GPUs", claim: claim("four", exact("gpus", "gpu.gpud.io", 4)), want: []string{"gpu-", "gpu-", "gpu-", "gpu-"}},
		{name: "two GPUs on one NVLink domain", claim: withMatch(claim("nvl", exact("gpus", "gpu.gpud.io", 2)), domain), want: []string{"gpu-", "gpu-"}},
		{name: "four GPUs on one NUMA node", claim: withMatch(claim("numa", exact("gpus", "gpu.gpud.io", 4)), numa), want: []string{"gpu-", "gpu-", "gpu-", "gpu-"}},
		{name: "fraction 20Gi", claim: claim("f", fraction("gpu", "20Gi", "")), want: []string{"gpu-"}, memory: "20Gi"},
		{name: "fraction rounded up to the step", claim: claim("fr", fraction("gpu", "1500Mi", "25")), want: []string{"gpu-"}, memory: "2Gi"},
		{name: "MIG 1g.10gb on an H100", claim: claim("m", migReq("mig", "1g.10gb")), node: "h100-a", want: []string{"-mig-1g10gb-"}},
		{name: "MIG 3g.20gb on an A100 in MIG mode", claim: claim("m3", migReq("mig", "3g.20gb")), node: "a100-a", want: []string{"-mig-3g20gb-"}},
		{name: "A100 by model", claim: claim("a", exact("gpu", "gpu.gpud.io", 1, `device.attributes["gpu.gpud.io"].productName.contains("A100")`)), node: "a100-a", want: []string{"gpu-"}},
		{name: "60Gi VRAM", claim: claim("vram", exact("gpu", "gpu.gpud.io", 1, `device.capacity["gpu.gpud.io"].memory.compareTo(quantity("60Gi")) >= 0`)), node: "h100-a", want: []string{"gpu-"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			v := c.build(t)
			allocs, err := place(t, v, Options{}, tc.claim)
			if err != nil {
				t.Fatalf("place: %v", err)
			}
			if len(allocs) != 1 {
				t.Fatalf("%d allocations", len(allocs))
			}
			a := allocs[0]
			if tc.node != "" && a.Node != tc.node {
				t.Errorf("node %s, want %s", a.Node, tc.node)
			}
			res := a.Result.Devices.Results
			if len(res) != len(tc.want) {
				t.Fatalf("%d results, want %d: %+v", len(res), len(tc.want), res)
			}
			seen := map[string]bool{}
			for i, r := range res {
				dev := v.Node(a.Node).Devices[r.Device]
				if !strings.Contains(r.Device, tc.want[i]) || dev.MIG != strings.Contains(tc.want[i], "mig") || r.Driver != DriverName || r.Pool != a.Node || r.Request != tc.claim.Spec.Devices.Requests[0].Name || seen[r.Device] {
					t.Errorf("result %d: %+v", i, r)
				}
				seen[r.Device] = true
				if dev.Shareable != (r.ShareID != nil) || dev.Shareable != (r.ConsumedCapacity != nil) {
					t.Errorf("result %d on shareable=%v device: share ID %v consumed %v", i, dev.Shareable, r.ShareID, r.ConsumedCapacity)
				}
				if tc.memory != "" {
					if q := r.ConsumedCapacity["memory"]; q.Cmp(resource.MustParse(tc.memory)) != 0 {
						t.Errorf("consumed memory %s, want %s", q.String(), tc.memory)
					}
				}
				if r.ShareID != nil && tc.memory == "" {
					if q := r.ConsumedCapacity["memory"]; q.Cmp(dev.Capacity["memory"].Value) != 0 {
						t.Errorf("whole GPU consumed memory %s, want all of it", q.String())
					}
				}
			}
			if m := tc.claim.Spec.Devices.Constraints; len(m) > 0 {
				n := v.Node(a.Node)
				var devs []*Device
				for _, r := range res {
					devs = append(devs, n.Devices[r.Device])
				}
				if !sameValue(devs, *m[0].MatchAttribute) {
					t.Errorf("devices %v do not share %s", seen, *m[0].MatchAttribute)
				}
			}
			ns := a.Result.NodeSelector
			if ns == nil || len(ns.NodeSelectorTerms) != 1 || len(ns.NodeSelectorTerms[0].MatchFields) != 1 ||
				ns.NodeSelectorTerms[0].MatchFields[0].Key != "metadata.name" || ns.NodeSelectorTerms[0].MatchFields[0].Values[0] != a.Node {
				t.Errorf("node selector %+v", ns)
			}
			if err := Check(v, a.Result); err != nil {
				t.Errorf("Check: %v", err)
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "pod-uid"}}
			now := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
			st, err := a.Status(pod, now)
			if err != nil {
				t.Fatal(err)
			}
			if st == tc.claim || tc.claim.Status.Allocation != nil || st.Status.Allocation.AllocationTimestamp == nil ||
				len(st.Status.ReservedFor) != 1 || st.Status.ReservedFor[0] != (resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "p", UID: "pod-uid"}) {
				t.Errorf("status %+v", st.Status)
			}
			if _, err := (Allocation{Claim: st, Result: a.Result}).Status(pod, now); !errors.Is(err, ErrInvalid) {
				t.Errorf("Status of an allocated claim = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestPlaceFillsThenFails(t *testing.T) {
	tests := []struct {
		name  string
		claim func(i int) *resourceapi.ResourceClaim
		fit   int // how many fit on the cluster
	}{
		// 8 H100 + 6 A100 without MIG.
		{name: "whole GPUs", fit: 14, claim: func(i int) *resourceapi.ResourceClaim {
			return claim(fmt.Sprint("w", i), exact("gpu", "gpu.gpud.io", 1))
		}},
		// 4 per H100 (80Gi) and 2 per A100 (40Gi).
		{name: "20Gi fractions", fit: 8*4 + 6*2, claim: func(i int) *resourceapi.ResourceClaim { return claim(fmt.Sprint("f", i), fraction("gpu", "20Gi", "")) }},
		// Two 7g slices on the A100s in MIG mode, 8 on the H100s.
		{name: "7g slices", fit: 10, claim: func(i int) *resourceapi.ResourceClaim {
			return claim(fmt.Sprint("m", i), exact("mig", "mig.gpud.io", 1, `device.attributes["gpu.gpud.io"].profile.startsWith("7g.")`))
		}},
		// 7 per MIG GPU: 16 on the A100s' two... 8 H100s x 7 + 2 A100 x 7.
		{name: "1g slices by compute", fit: 8*7 + 2*7, claim: func(i int) *resourceapi.ResourceClaim {
			return claim(fmt.Sprint("s", i), exact("mig", "mig.gpud.io", 1, `device.attributes["gpu.gpud.io"].profile.startsWith("1g.")`))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			for i := 0; ; i++ {
				v := c.build(t)
				allocs, err := place(t, v, Options{}, tc.claim(i))
				if err != nil {
					if i != tc.fit || !errors.Is(err, ErrNoFit) {
						t.Fatalf("claim %d: %v; want %d to fit, then ErrNoFit", i, err, tc.fit)
					}
					var nf *allocator.NoFitError
					if i > 0 && !errors.As(err, &nf) && !strings.Contains(err.Error(), "no free") {
						t.Logf("no fit: %v", err)
					}
					break
				}
				if i >= tc.fit {
					t.Fatalf("claim %d fits; want only %d", i, tc.fit)
				}
				c.commit(t, allocs)
				if err := Check(c.build(t)); err != nil {
					t.Fatalf("after claim %d: %v", i, err)
				}
			}
		})
	}
}

func TestCheckFindsOverAllocation(t *testing.T) {
	res := func(dev string, share bool, mem string) resourceapi.DeviceRequestAllocationResult {
		r := resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: DriverName, Pool: "h100-a", Device: dev}
		if share {
			id := types.UID(fmt.Sprint("share-", dev, mem))
			r.ShareID = &id
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(mem), "cores": resource.MustParse("0")}
		}
		return r
	}
	alloc := func(rs ...resourceapi.DeviceRequestAllocationResult) *resourceapi.AllocationResult {
		return &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: rs}}
	}
	tests := []struct {
		name   string
		allocs []*resourceapi.AllocationResult
		want   string // "" fits
	}{
		{name: "fractions within the GPU", allocs: []*resourceapi.AllocationResult{alloc(res("gpu-0", true, "40Gi")), alloc(res("gpu-0", true, "40Gi"))}},
		{name: "fractions over the GPU", allocs: []*resourceapi.AllocationResult{alloc(res("gpu-0", true, "40Gi")), alloc(res("gpu-0", true, "41Gi"))}, want: "memory: 81Gi consumed of 80Gi"},
		{name: "disjoint MIG placements", allocs: []*resourceapi.AllocationResult{alloc(res("gpu-1-mig-3g40gb-0", false, "")), alloc(res("gpu-1-mig-3g40gb-4", false, ""))}},
		{name: "overlapping MIG placements", allocs: []*resourceapi.AllocationResult{alloc(res("gpu-1-mig-3g40gb-0", false, "")), alloc(res("gpu-1-mig-1g10gb-3", false, ""))}, want: "counter memory-slice-3"},
		{name: "MIG and the whole GPU", allocs: []*resourceapi.AllocationResult{alloc(res("gpu-2", true, "1Gi")), alloc(res("gpu-2-mig-1g10gb-6", false, ""))}, want: "counter"},
		{name: "MIG device twice", allocs: []*resourceapi.AllocationResult{alloc(res("gpu-3-mig-7g80gb-0", false, "")), alloc(res("gpu-3-mig-7g80gb-0", false, ""))}, want: "allocated 2 times"},
		{name: "exclusive and shared", allocs: []*resourceapi.AllocationResult{alloc(res("gpu-4", false, "")), alloc(res("gpu-4", true, "1Gi"))}, want: "allocated exclusively"},
		{name: "a full MIG GPU", allocs: []*resourceapi.AllocationResult{alloc(res("gpu-5-mig-2g20gb-0", false, "")), alloc(res("gpu-5-mig-2g20gb-2", false, "")),
			alloc(res("gpu-5-mig-2g20gb-4", false, "")), alloc(res("gpu-5-mig-1g10gb-6", false, ""))}},
		{name: "one slice too many", allocs: []*resourceapi.AllocationResult{alloc(res("gpu-5-mig-2g20gb-0", false, "")), alloc(res("gpu-5-mig-2g20gb-2", false, "")),
			alloc(res("gpu-5-mig-2g20gb-4", false, "")), alloc(res("gpu-5-mig-1g10gb-6", false, "")), alloc(res("gpu-5-mig-1g20gb-6", false, ""))}, want: "gpu-5-counters: counter compute-slices: 8 consumed of 7"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := newCluster(t).build(t)
			err := Check(v, tc.allocs...)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrOverAllocated) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want ErrOverAllocated with %q", err, tc.want)
			}
		})
	}
}

func TestPlacePodWithTwoClaims(t *testing.T) {
	c := newCluster(t)
	v := c.build(t)
	// Only the A100 node has 3g.20gb; the whole GPU must follow it there,
	// even when the first claim would rather go to the H100 node.
	for seed := range uint64(4) {
		allocs, err := place(t, v, Options{Rand: rand.New(rand.NewPCG(seed, 1))},
			claim("gpu", exact("gpu", "gpu.gpud.io", 1)), claim("mig", migReq("mig", "3g.20gb")))
		if err != nil || len(allocs) != 2 {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if allocs[0].Node != "a100-a" || allocs[1].Node != "a100-a" || allocs[0].Claim.Name != "gpu" {
			t.Fatalf("seed %d: claims on %s and %s", seed, allocs[0].Node, allocs[1].Node)
		}
		if err := Check(v, allocs[0].Result, allocs[1].Result); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := AllocatedNode([]*resourceapi.ResourceClaim{claim("new"), {Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Driver: DriverName, Pool: "a100-a", Device: "gpu-3"}}}}}}}); err != nil || n != "a100-a" {
		t.Errorf("AllocatedNode = %q, %v", n, err)
	}
}

func TestPlaceNodesAndTaints(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *cluster)
		req     resourceapi.DeviceRequest
		opt     Options
		node    string // "" no fit
		devices string // device name prefix
	}{
		{name: "cordoned node", req: exact("gpu", "gpu.gpud.io", 1, `device.attributes["gpu.gpud.io"].productName.contains("H100")`),
			mutate: func(c *cluster) { c.in.Nodes[0].Spec.Unschedulable = true }},
		{name: "node filter", req: exact("gpu", "gpu.gpud.io", 1), node: "a100-a",
			opt: Options{NodeFilter: func(n *Node) bool { return n.Name == "a100-a" }}},
		{name: "tainted GPUs are not used", req: exact("gpu", "gpu.gpud.io", 1), node: "h100-a", devices: "gpu-7",
			mutate: func(c *cluster) { taintAllBut(c, "gpu-7", nil) }},
		{name: "a tolerated taint", node: "h100-a", devices: "gpu-",
			req: func() resourceapi.DeviceRequest {
				r := exact("gpu", "gpu.gpud.io", 8)
				r.Exactly.Tolerations = []resourceapi.DeviceToleration{{Key: "gpu.gpud.io/unhealthy", Operator: resourceapi.DeviceTolerationOpExists}}
				return r
			}(),
			mutate: func(c *cluster) { taintAllBut(c, "gpu-7", nil) }},
		{name: "untolerated taint everywhere", req: exact("gpu", "gpu.gpud.io", 2),
			mutate: func(c *cluster) { taintAllBut(c, "gpu-7", []string{"a100-a"}) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			if tc.mutate != nil {
				tc.mutate(c)
			}
			v := c.build(t)
			allocs, err := place(t, v, tc.opt, claim("c", tc.req))
			if tc.node == "" {
				if !errors.Is(err, ErrNoFit) {
					t.Fatalf("place = %v, want ErrNoFit", err)
				}
				return
			}
			if err != nil || allocs[0].Node != tc.node {
				t.Fatalf("place = %+v, %v; want node %s", allocs, err, tc.node)
			}
			for _, r := range allocs[0].Result.Devices.Results {
				if !strings.HasPrefix(r.Device, tc.devices) {
					t.Errorf("device %s, want %s*", r.Device, tc.devices)
				}
				if len(tc.req.Exactly.Tolerations) > 0 && len(r.Tolerations) == 0 {
					t.Errorf("result %s lacks the request's tolerations", r.Device)
				}
			}
		})
	}
}

// taintAllBut taints every whole GPU of h100-a but keep, and every device
// of the nodes in also, NoSchedule as gpud does for a recoverable Xid.
func taintAllBut(c *cluster, keep string, also []string) {
	for _, s := range c.in.Slices {
		node := *s.Spec.NodeName
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			if (node == "h100-a" && d.Name != keep) || slices.Contains(also, node) {
				d.Taints = []resourceapi.DeviceTaint{{Key: "gpu.gpud.io/unhealthy", Value: "xid-13", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
			}
		}
	}
}

// TestPlaceLeavesUsageAsItWas: Place's what-ifs (undo log, not a copy of
// the usage) leave the view's usage exactly as before, whether the pod
// places or not.
func TestPlaceLeavesUsageAsItWas(t *testing.T) {
	c := newCluster(t)
	for i, cl := range []*resourceapi.ResourceClaim{
		claim("f0", fraction("gpu", "20Gi", "")), claim("m0", migReq("mig", "1g.10gb")), claim("w0", exact("gpu", "gpu.gpud.io", 2)),
	} {
		allocs, err := place(t, c.build(t), Options{}, cl)
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		c.commit(t, allocs)
	}
	v := c.build(t)
	snapshot := func() (map[int32]devUse, map[*GPU]int) {
		dev := map[int32]devUse{}
		for k, d := range v.usage.dev {
			c := *d
			c.consumed = maps.Clone(d.consumed)
			c.milli, c.milliOK = 0, false
			dev[k] = c
		}
		return dev, maps.Clone(v.usage.migs)
	}
	wantDev, wantMIG := snapshot()
	if len(wantDev) == 0 || len(wantMIG) == 0 {
		t.Fatalf("usage %v, MIG %v: want some of each", wantDev, wantMIG)
	}
	for _, tc := range []struct {
		name   string
		claims []*resourceapi.ResourceClaim
		fits   bool
	}{
		{"fraction and whole GPU", []*resourceapi.ResourceClaim{claim("f1", fraction("gpu", "20Gi", "")), claim("w1", exact("gpu", "gpu.gpud.io", 1))}, true},
		{"MIG slice", []*resourceapi.ResourceClaim{claim("m1", migReq("mig", "1g.10gb"))}, true},
		{"too many GPUs", []*resourceapi.ResourceClaim{claim("w2", exact("gpu", "gpu.gpud.io", 1)), claim("w3", exact("gpu", "gpu.gpud.io", 9))}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := place(t, v, Options{}, tc.claims...)
			if (err == nil) != tc.fits || (err != nil && !errors.Is(err, ErrNoFit)) {
				t.Fatalf("Place() = %v, want fits %v", err, tc.fits)
			}
			if gotDev, gotMIG := snapshot(); !reflect.DeepEqual(gotDev, wantDev) || !maps.Equal(gotMIG, wantMIG) {
				t.Fatalf("usage after Place:\n%v %v\nwant\n%v %v", gotDev, gotMIG, wantDev, wantMIG)
			}
		})
	}
}
