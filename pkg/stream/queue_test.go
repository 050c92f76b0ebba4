package stream

import (
	"fmt"
	"testing"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
)

func TestQueueDropsOldestSamples(t *testing.T) {
	q := newQueue(3, 16)
	dropped := 0
	for i := range 5 {
		dropped += q.pushSamples(&telemetryv1.Samples{TakenUnixNanos: int64(i)})
	}
	if dropped != 2 || q.droppedSamples != 2 {
		t.Fatalf("dropped %d (counted %d), want 2", dropped, q.droppedSamples)
	}
	var got []int64
	for {
		_, s, ok := q.pop()
		if !ok {
			break
		}
		got = append(got, s.GetTakenUnixNanos())
	}
	if fmt.Sprint(got) != "[2 3 4]" {
		t.Fatalf("kept %v, want the newest [2 3 4]", got)
	}
}

func TestQueueNeverDropsEvents(t *testing.T) {
	q := newQueue(2, 16)
	for i := range 3 {
		q.pushSamples(&telemetryv1.Samples{TakenUnixNanos: int64(i)})
	}
	// 4 devices x 10 ignored Xids, then one fatal Xid and one recovery on
	// GPU-0, and a fatal one on GPU-3: 43 events through a queue of 16.
	for i := range 40 {
		q.pushEvent(&telemetryv1.Event{Kind: telemetryv1.Event_KIND_XID, DeviceUuid: fmt.Sprintf("GPU-%d", i%4), Xid: 13})
	}
	q.pushEvent(&telemetryv1.Event{Kind: telemetryv1.Event_KIND_XID, DeviceUuid: "GPU-0", Xid: 79, Health: telemetryv1.Health_HEALTH_LOST, Reason: "Xid 79"})
	q.pushEvent(&telemetryv1.Event{Kind: telemetryv1.Event_KIND_HEALTH, DeviceUuid: "GPU-1", Health: telemetryv1.Health_HEALTH_HEALTHY})
	q.pushEvent(&telemetryv1.Event{Kind: telemetryv1.Event_KIND_XID, DeviceUuid: "GPU-3", Xid: 48, Health: telemetryv1.Health_HEALTH_UNHEALTHY, Reason: "Xid 48"})
	for i := range 3 { // more ignored Xids after the fatal one
		q.pushEvent(&telemetryv1.Event{Kind: telemetryv1.Event_KIND_XID, DeviceUuid: "GPU-3", Xid: uint64(13 + i)})
	}
	_, events := q.lens()
	if events > 16 {
		t.Fatalf("%d events queued, bound 16", events)
	}
	var total uint64
	health := map[string]telemetryv1.Health{}
	first := true
	for {
		ev, s, ok := q.pop()
		if !ok {
			break
		}
		if s != nil {
			if first {
				t.Fatal("a sample before the events")
			}
			continue
		}
		first = false
		total += uint64(max(ev.GetCount(), 1))
		if ev.GetHealth() != telemetryv1.Health_HEALTH_UNSPECIFIED {
			health[ev.GetDeviceUuid()] = ev.GetHealth()
		}
	}
	if total != 46 {
		t.Errorf("events stand for %d, want all 46", total)
	}
	want := map[string]telemetryv1.Health{"GPU-0": telemetryv1.Health_HEALTH_LOST, "GPU-1": telemetryv1.Health_HEALTH_HEALTHY, "GPU-3": telemetryv1.Health_HEALTH_UNHEALTHY}
	if fmt.Sprint(health) != fmt.Sprint(want) {
		t.Errorf("newest health per device %v, want %v", health, want)
	}
	if q.mergedEvents == 0 {
		t.Error("no merge counted")
	}
}

func TestQueueRequeuesUnackedEventsFirst(t *testing.T) {
	q := newQueue(2, 16)
	q.pushEvent(&telemetryv1.Event{Kind: telemetryv1.Event_KIND_ECC, DeviceUuid: "GPU-1"})
	q.requeueEvents([]*telemetryv1.Event{{Kind: telemetryv1.Event_KIND_XID, DeviceUuid: "GPU-0"}})
	ev, _, _ := q.pop()
	if ev.GetDeviceUuid() != "GPU-0" {
		t.Fatalf("first event %v, want the requeued GPU-0", ev)
	}
}
