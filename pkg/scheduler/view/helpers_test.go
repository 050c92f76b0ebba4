package view

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/internal/testkit/schedtest"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/gpu"
)

// simState reads a simulated node as the agent's wiring does (as
// pkg/dra's tests do); migOn turns MIG mode on for those GPU indices.
func simState(t testing.TB, profile, name string, migOn ...int) dra.NodeState {
	t.Helper()
	return schedtest.SimState(t, profile, name, migOn...)
}

// published builds a node's slices with pkg/dra.Build.
func published(t testing.TB, name string, st dra.NodeState) (dra.Published, []*resourceapi.ResourceSlice) {
	t.Helper()
	return schedtest.Publish(t, name, st)
}

func k8sNode(name string) *corev1.Node { return schedtest.Node(name, nil) }

// shippedClasses reads deploy/dra/deviceclasses.yaml; the slice is the
// caller's to append to.
func shippedClasses(t testing.TB) []*resourceapi.DeviceClass {
	t.Helper()
	out := slices.Clone(schedtest.ShippedClasses(t))
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
	return schedtest.Exact(name, class, count, sel...)
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
	return exact(name, "mig.gpud.io", 1, schedtest.MIGSelector(profile))
}

// healthy is gpu.Healthy, to keep the import used by helpers that mutate
// inventories.
var _ = gpu.Healthy
