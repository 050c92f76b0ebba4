// Package schedtest holds test helpers shared by the scheduler's tests
// (pkg/scheduler/view, pkg/scheduler/decide, test/schedbench): a simulated
// node's state and the ResourceSlices the resourceslice controller
// publishes for it, the shipped DeviceClasses, and device requests.
package schedtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
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
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/simnode"
)

// SimState reads a simulated node of a simnode profile as the agent's
// wiring does: the inventory from discovery (with hostname) and each GPU's
// MIG catalog from pkg/mig. migOn turns MIG mode on for those GPU indices
// (no MIG devices yet).
func SimState(t testing.TB, profile, hostname string, migOn ...int) dra.NodeState {
	t.Helper()
	n := simnode.NewBuiltin(profile)
	defer n.Close()
	inv, err := discovery.New(n, hostname, nil).Inventory()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	st := dra.NodeState{Inventory: inv, MIG: map[string]dra.MIGCatalog{}}
	devlib := device.New(n)
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		g.MIGEnabled = slices.Contains(migOn, g.Index)
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

// Publish builds a node's pool with pkg/dra.Build and its ResourceSlices.
func Publish(t testing.TB, name string, st dra.NodeState) (dra.Published, []*resourceapi.ResourceSlice) {
	t.Helper()
	pub, err := dra.Build(name, st)
	if err != nil {
		t.Fatalf("dra.Build: %v", err)
	}
	return pub, Slices(name, pub)
}

// Slices turns a node's published pool into ResourceSlices as the
// resourceslice controller publishes them.
func Slices(name string, pub dra.Published) []*resourceapi.ResourceSlice {
	pool := pub.Resources.Pools[name]
	var out []*resourceapi.ResourceSlice
	for i, s := range pool.Slices {
		node := name
		out = append(out, &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", name, dra.DriverName, i)},
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

// Node is a Kubernetes node with labels and room for any test's pods.
func Node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: labels},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("224"),
			corev1.ResourceMemory: resource.MustParse("2Ti"),
		}},
	}
}

var classes struct {
	sync.Once
	c   []*resourceapi.DeviceClass
	err error
}

// ShippedClasses reads deploy/dra/deviceclasses.yaml (once per test
// binary).
func ShippedClasses(t testing.TB) []*resourceapi.DeviceClass {
	t.Helper()
	classes.Do(func() { classes.c, classes.err = ReadClasses(ShippedClassesPath()) })
	if classes.err != nil {
		t.Fatal(classes.err)
	}
	return classes.c
}

// ShippedClassesPath is deploy/dra/deviceclasses.yaml in the source tree
// this package was built from.
func ShippedClassesPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "dra", "deviceclasses.yaml")
}

// ReadClasses reads the DeviceClasses of a multi-document YAML file.
func ReadClasses(path string) ([]*resourceapi.DeviceClass, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("device classes: %w", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*resourceapi.DeviceClass
	for {
		var c resourceapi.DeviceClass
		if err := dec.Decode(&c); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("device classes in %s: %w", path, err)
		}
		if c.Kind == "DeviceClass" && c.Name != "" {
			out = append(out, &c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no DeviceClass in %s", path)
	}
	return out, nil
}

// Exact is a request for count devices of a class matching the CEL
// selectors.
func Exact(name, class string, count int64, sel ...string) resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}
	for _, s := range sel {
		r.Exactly.Selectors = append(r.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	return r
}

// MIGSelector is the CEL selector for a MIG device of a profile.
func MIGSelector(profile string) string {
	return fmt.Sprintf(`device.attributes["gpu.gpud.io"].profile == %q`, profile)
}
