package heal

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkPlan: one plan over n running pods of 8 GPUs each (gangs of
// 4), with one GPU failed.
func BenchmarkPlan(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		pods := make([]Pod, n)
		for i := range pods {
			node := fmt.Sprintf("n%d", i)
			p := Pod{Key: fmt.Sprintf("ns/p%d", i), UID: fmt.Sprint(i), Node: node, Group: fmt.Sprintf("ns/g%d", i/4), Started: t0}
			for g := range 8 {
				p.Devices = append(p.Devices, Device{Node: node, Name: fmt.Sprintf("gpu-%d", g), UUID: fmt.Sprintf("GPU-%d-%d", i, g)})
			}
			pods[i] = p
		}
		bad := map[DeviceKey]string{{"n5", "GPU-5-3"}: "Xid 79"}
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				h, _ := New(Config{})
				h.Plan(Input{Pods: pods, Unhealthy: bad, Now: t0.Add(time.Minute)})
			}
		})
	}
}

// BenchmarkPlanManyFailed: a whole rack of 1,000 single pods loses its
// GPUs at once among 10,000 running pods.
func BenchmarkPlanManyFailed(b *testing.B) {
	pods := make([]Pod, 10000)
	bad := map[DeviceKey]string{}
	for i := range pods {
		node := fmt.Sprintf("n%d", i)
		pods[i] = Pod{Key: fmt.Sprintf("ns/p%d", i), UID: fmt.Sprint(i), Node: node, Started: t0,
			Devices: []Device{{Node: node, Name: "gpu-0", UUID: fmt.Sprintf("GPU-%d", i)}}}
		if i < 1000 {
			bad[DeviceKey{node, fmt.Sprintf("GPU-%d", i)}] = "Xid 79"
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		h, _ := New(Config{MaxPerPlan: 10000})
		h.Plan(Input{Pods: pods, Unhealthy: bad, Now: t0})
	}
}
