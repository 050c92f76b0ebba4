package heal_test

import (
	"fmt"
	"time"

	"github.com/gpud/gpud/pkg/scheduler/heal"
)

// A gang of two pods on two nodes loses GPU-7 on node a: both members go,
// the checkpointable pod on the same GPU first; a pod marked keep stays.
func ExampleHealer_Plan() {
	h, err := heal.New(heal.Config{})
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	gpu := func(node, uuid string) []heal.Device { return []heal.Device{{Node: node, Name: "gpu-7", UUID: uuid}} }
	p := h.Plan(heal.Input{
		Pods: []heal.Pod{
			{Key: "ml/train-0", UID: "1", Node: "a", Group: "ml/train", Devices: gpu("a", "GPU-7")},
			{Key: "ml/train-1", UID: "2", Node: "b", Group: "ml/train", Devices: gpu("b", "GPU-9")},
			{Key: "ml/notebook", UID: "3", Node: "a", Devices: gpu("a", "GPU-7"), Annotation: "keep"},
			{Key: "ml/sweep", UID: "4", Node: "a", Devices: gpu("a", "GPU-7"), Checkpointable: true, LastCheckpoint: now.Add(-3 * time.Minute)},
		},
		Unhealthy: map[heal.DeviceKey]string{{Node: "a", UUID: "GPU-7"}: "Xid 79"},
		Now:       now,
	})
	for _, r := range p.Removals {
		fmt.Printf("%s %s: %s\n", r.Action, r.Pod.Key, r.Why())
	}
	for _, l := range p.Left {
		fmt.Printf("kept %s\n", l.Pod.Key)
	}
	// Output:
	// evict ml/sweep: GPU GPU-7 on node a failed (Xid 79), reported by the telemetry stream
	// evict ml/train-0: GPU GPU-7 on node a failed (Xid 79), reported by the telemetry stream
	// evict ml/train-1: gang ml/train member ml/train-0 lost GPU GPU-7 on node a (Xid 79), reported by the telemetry stream
	// kept ml/notebook
}
