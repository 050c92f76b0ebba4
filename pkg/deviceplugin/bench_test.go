package deviceplugin

import (
	"fmt"
	"slices"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpud/gpud/pkg/timeslice"
)

// benchSets are the device sets the benchmarks serve: 8 GPUs x 7 MIG
// slices (mixed strategy) and 8 GPUs x 16 replicas.
func benchSets(b *testing.B) map[string]*deviceSet {
	b.Helper()
	mig := testConfig()
	mig.MIGStrategy = MIGMixed
	rep := testConfig()
	rep.Sharing = timeslice.Config{Default: &timeslice.Sharing{Replicas: 16, LimitMemory: true}}
	sets := map[string]*deviceSet{
		"mig=8x7":       build(synthInventory(8, 7), mig).sets["nvidia.com/mig-1g.10gb"],
		"replicas=8x16": build(synthInventory(8, 0), rep).sets["nvidia.com/gpu.shared"],
	}
	for name, s := range sets {
		if s == nil {
			b.Fatalf("%s: no device set", name)
		}
	}
	return sets
}

// reportPercentiles adds p50 and p99 latency of the timed calls.
func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)*50/100].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(d[min(len(d)-1, len(d)*99/100)].Nanoseconds()), "p99-ns")
}

func BenchmarkAllocate(b *testing.B) {
	for _, name := range []string{"mig=8x7", "replicas=8x16"} {
		s := benchSets(b)[name]
		for _, n := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/devices=%d", name, n), func(b *testing.B) {
				ids := make([]string, n)
				for i := range n {
					ids[i] = s.devices[len(s.devices)-1-i].ID
				}
				req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}
				var lat []time.Duration
				b.ReportAllocs()
				for b.Loop() {
					t0 := time.Now()
					if _, err := allocate(s, ListBoth, "", req); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
				}
				reportPercentiles(b, lat)
			})
		}
	}
}

func BenchmarkGetPreferredAllocation(b *testing.B) {
	for _, name := range []string{"mig=8x7", "replicas=8x16"} {
		s := benchSets(b)[name]
		// Every third device is taken, so groups are partly used.
		var avail []string
		for i, d := range s.devices {
			if i%3 != 0 {
				avail = append(avail, d.ID)
			}
		}
		for _, n := range []int{1, 4, 8} {
			b.Run(fmt.Sprintf("%s/size=%d", name, n), func(b *testing.B) {
				var lat []time.Duration
				b.ReportAllocs()
				for b.Loop() {
					t0 := time.Now()
					got, err := preferred(s, avail, nil, n)
					if err != nil || len(got) != n {
						b.Fatalf("preferred = %v, %v", got, err)
					}
					lat = append(lat, time.Since(t0))
				}
				reportPercentiles(b, lat)
			})
		}
	}
}
