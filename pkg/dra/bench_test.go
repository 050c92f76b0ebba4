package dra

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// BenchmarkNodePrepareResources prepares and unprepares one claim on the
// simulated DGX H100: a whole GPU (CDI spec, checkpoint) and a dynamic
// 1g.10gb slice (also a MIG create and destroy through pkg/mig's planner
// and applier on simnode). One op is a prepare plus its unprepare.
func BenchmarkNodePrepareResources(b *testing.B) {
	for _, tc := range []struct{ name, device string }{
		{name: "whole-gpu", device: "gpu-0"},
		{name: "fraction-20Gi", device: "gpu-0"},
		{name: "dynamic-mig-1g.10gb", device: "gpu-0-mig-1g10gb-6"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			n, _, pub := buildSim(b, "dgx-h100")
			dir := b.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "p"), 0o755); err != nil {
				b.Fatal(err)
			}
			p, err := NewPreparer(PreparerConfig{NodeName: "dgx-h100", StateDir: filepath.Join(dir, "p"), CDIDir: filepath.Join(dir, "cdi"),
				Devices: func() map[string]DeviceRef { return pub.Devices }, MIG: newSimMIG(n, filepath.Join(dir, "journal.json"))})
			if err != nil {
				b.Fatal(err)
			}
			a := alloc{pool: "dgx-h100", device: tc.device}
			if tc.name == "fraction-20Gi" {
				a.shareID, a.capacity = "s1", map[resourceapi.QualifiedName]string{"memory": "20Gi", "cores": "25"}
			}
			c := claim("uid", "c", a)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				c.UID = types.UID(fmt.Sprintf("uid-%d", i))
				res, err := p.Prepare(b.Context(), []*resourceapi.ResourceClaim{c})
				if err != nil || res[c.UID].Err != nil {
					b.Fatalf("prepare: %v %v", err, res[c.UID].Err)
				}
				un, err := p.Unprepare(b.Context(), []kubeletplugin.NamespacedObject{{UID: c.UID}})
				if err != nil || un[c.UID] != nil {
					b.Fatalf("unprepare: %v %v", err, un[c.UID])
				}
			}
		})
	}
}

// BenchmarkBuild builds the slices of a simulated node.
func BenchmarkBuild(b *testing.B) {
	for _, node := range []string{"dgx-h100", "pcie-l40s"} {
		b.Run(node, func(b *testing.B) {
			_, st, _ := buildSim(b, node)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Build(node, st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
