package view

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/simnode"
)

// simState reads a simulated node as the agent's wiring does (as
// pkg/dra's tests do): the inventory from discovery and each GPU's MIG
// catalog from pkg/mig. migOn turns MIG mode on for those GPU indices
// (no MIG devices yet).
func simState(t testing.TB, profile, name string, migOn ...int) dra.NodeState {
	t.Helper()
	n := simnode.NewBuiltin(profile)
	t.Cleanup(n.Close)
	inv, err := discovery.New(n, name, nil).Inventory()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	st := dra.NodeState{Inventory: inv, MIG: map[string]dra.MIGCatalog{}}
	devlib := device.New(n)
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		for _, on := range migOn {
			if g.Index == on {
				g.MIGEnabled = true
			}
		}
		if !g.MIGCapable {
			continue
		}
		h, ret := n.DeviceGetHandleByIndex(g.Index)
		if ret != nvml.SUCCESS {
			t.Fatalf("gpu %d: %v", g.Index, ret)
		}
		c, err := mig.ReadCatalog(h, devlib)
		if err != nil {
			t.Fatalf("catalog of gpu %d: %v", g.Index, err)
		}
		cat := dra.MIGCatalog{MemorySlices: c.MemorySlices, ComputeSlices: c.ComputeSlices, LiveModeChange: dra.LiveMIGModeChange(g.Architecture)}
		for _, p := range c.Profiles {
			mp := dra.MIGProfile{Name: p.Name, ComputeSlices: p.Slices, MemoryBytes: p.MemoryMiB << 20}
			for _, pl := range p.Placements {
				mp.Placements = append(mp.Placements, dra.Placement{Start: pl.Start, Size: pl.Size})
			}
			cat.Profiles = append(cat.Profiles, mp)
		}
		st.MIG[g.UUID] = cat
	}
	return st
}

// published builds a node's slices with pkg/dra.Build.
func published(t testing.TB, name string, st dra.NodeState) (dra.Published, []*resourceapi.ResourceSlice) {
	t.Helper()
	pub, err := dra.Build(name, st)
	if err != nil {
		t.Fatalf("dra.Build: %v", err)
	}
	return pub, toSlices(name, pub)
}

// toSlices turns a pool into ResourceSlices as the resourceslice
// controller publishes them.
func toSlices(name string, pub dra.Published) []*resourceapi.ResourceSlice {
	pool := pub.Resources.Pools[name]
	var out []*resourceapi.ResourceSlice
	for i, s := range pool.Slices {
		node := name
		out = append(out, &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", name, "gpu.gpud.io", i)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:         dra.DriverName,
				Pool:           resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
				NodeName:       &node,
				Devices:        s.Devices,
				SharedCounters: s.SharedCounters,
			},
		})
	}
	return out
}

func k8sNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("224"),
			corev1.ResourceMemory: resource.MustParse("2Ti"),
		}},
	}
}

// shippedClasses reads deploy/dra/deviceclasses.yaml.
func shippedClasses(t testing.TB) []*resourceapi.DeviceClass {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "dra", "deviceclasses.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*resourceapi.DeviceClass
	for {
		var c resourceapi.DeviceClass
		if err := dec.Decode(&c); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if c.Name != "" {
			out = append(out, &c)
		}
	}
	if len(out) != 2 {
		t.Fatalf("%d DeviceClasses in deploy/dra, want 2", len(out))
	}
	return out
}

// cluster is a test cluster: one dgx-h100 (MIG off, dynamic MIG
// placements) and one dgx-a100 with MIG on for GPUs 0 and 1.
type cluster struct {
	in  Inputs
	pub map[string]dra.Published
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	c := &cluster{pub: map[string]dra.Published{}}
	c.in.Classes = shippedClasses(t)
	for _, n := range []struct {
		name, profile string
		mig           []int
	}{{"h100-a", "dgx-h100", nil}, {"a100-a", "dgx-a100", []int{0, 1}}} {
		pub, sl := published(t, n.name, simState(t, n.profile, n.name, n.mig...))
		c.pub[n.name] = pub
		c.in.Slices = append(c.in.Slices, sl...)
		c.in.Nodes = append(c.in.Nodes, k8sNode(n.name))
	}
	return c
}

func (c *cluster) build(t testing.TB) *View {
	t.Helper()
	v, skips := Build(c.in)
	if len(skips) > 0 {
		t.Fatalf("skips: %v", skips)
	}
	return v
}

func claim(name string, reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}},
	}
}

func exact(name, class string, count int64, sel ...string) resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}
	for _, s := range sel {
		r.Exactly.Selectors = append(r.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	return r
}

func fraction(name, mem, cores string) resourceapi.DeviceRequest {
	r := exact(name, "gpu.gpud.io", 1)
	r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
	if mem != "" {
		r.Exactly.Capacity.Requests["memory"] = resource.MustParse(mem)
	}
	if cores != "" {
		r.Exactly.Capacity.Requests["cores"] = resource.MustParse(cores)
	}
	return r
}

func migReq(name, profile string) resourceapi.DeviceRequest {
	return exact(name, "mig.gpud.io", 1, fmt.Sprintf(`device.attributes["gpu.gpud.io"].profile == %q`, profile))
}

// healthy is gpu.Healthy, to keep the import used by helpers that mutate
// inventories.
var _ = gpu.Healthy
