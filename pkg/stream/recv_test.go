package stream

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
)

// sweepServer returns a server holding node-a's Hello, and the stream's
// receive target.
func sweepServer(t testing.TB) (*Server, *recvTarget) {
	now := time.Unix(1000, 0)
	srv, err := NewServer(ServerConfig{Authenticate: testAuth{}, MaxDevices: 16, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	h := testHello()
	h.NodeName, h.IntervalMillis = "node-a", 1000
	known, err := validateHello(h, 16)
	if err != nil {
		t.Fatal(err)
	}
	srv.hello("node-a", 1, func(error) {}, h)
	return srv, &recvTarget{s: srv, node: "node-a", gen: 1, known: &known}
}

func marshal(t testing.TB, m *telemetryv1.AgentMessage) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sweepSeeds(t testing.TB) map[string][]byte {
	samples := func(s *telemetryv1.Samples) []byte {
		return marshal(t, &telemetryv1.AgentMessage{Seq: 9, Kind: &telemetryv1.AgentMessage_Samples{Samples: s}})
	}
	sweep := samples(testSamples(5 << 30))
	return map[string][]byte{
		"sweep":         sweep,
		"no values":     samples(&telemetryv1.Samples{Devices: []*telemetryv1.DeviceSample{{Uuid: testGPU}}}),
		"repeated seq":  protowire.AppendVarint(protowire.AppendTag(sweep, 1, protowire.VarintType), 10),
		"unknown field": protowire.AppendVarint(protowire.AppendTag(sweep, 99, protowire.VarintType), 1),
		"unknown device": samples(&telemetryv1.Samples{Devices: []*telemetryv1.DeviceSample{
			{Uuid: "GPU-other", MemoryUsedBytes: ptr(uint64(1))}}}),
		"utilization above 100": samples(&telemetryv1.Samples{Devices: []*telemetryv1.DeviceSample{
			{Uuid: testGPU, SmUtilPercent: ptr(101.0)}}}),
		"claims": samples(&telemetryv1.Samples{Devices: []*telemetryv1.DeviceSample{
			{Uuid: testGPU, Claims: []*telemetryv1.ClaimMemory{{ClaimUid: "c", UsedBytes: 1}}}}}),
		"event": marshal(t, &telemetryv1.AgentMessage{Seq: 3, Kind: &telemetryv1.AgentMessage_Event{Event: &telemetryv1.Event{
			Kind: telemetryv1.Event_KIND_XID, DeviceUuid: testGPU, Xid: 79, Health: telemetryv1.Health_HEALTH_LOST}}}),
	}
}

// checkSweep applies data on the fast path of one server and the usual
// path of another: when the fast path takes it, both states are equal;
// when it does not, its server is unchanged.
func checkSweep(t *testing.T, data []byte) (fast bool) {
	fastSrv, target := sweepServer(t)
	slowSrv, slowTarget := sweepServer(t)
	before := fastSrv.Telemetry(time.Unix(1000, 0), 3)
	if !fastSrv.applySweep(target, data) {
		if got := fastSrv.Telemetry(time.Unix(1000, 0), 3); !reflect.DeepEqual(got, before) {
			t.Fatalf("the fast path declined and changed the state: %+v, was %+v", got, before)
		}
		return false
	}
	var m telemetryv1.AgentMessage
	if err := proto.Unmarshal(data, &m); err != nil {
		t.Fatalf("the fast path took a message proto refuses: %v", err)
	}
	if m.GetSamples() == nil {
		t.Fatalf("the fast path took a message that is not samples: %v", &m)
	}
	if err := slowSrv.apply("node-a", 1, &m, slowTarget.known); err != nil {
		t.Fatalf("the fast path took a message the usual path refuses: %v", err)
	}
	now := time.Unix(1000, 0)
	if got, want := fastSrv.Telemetry(now, 3), slowSrv.Telemetry(now, 3); !reflect.DeepEqual(got, want) {
		t.Fatalf("fast path state %+v, usual path %+v", got, want)
	}
	return true
}

func TestSweepFastPath(t *testing.T) {
	wantFast := map[string]bool{"sweep": true, "no values": true, "repeated seq": true}
	for name, data := range sweepSeeds(t) {
		t.Run(name, func(t *testing.T) {
			if got := checkSweep(t, data); got != wantFast[name] {
				t.Errorf("fast path taken = %v, want %v", got, wantFast[name])
			}
		})
	}
}

func TestSweepFastPathAllocatesNothing(t *testing.T) {
	_, target := sweepServer(t)
	data := mem.BufferSlice{mem.SliceBuffer(sweepSeeds(t)["sweep"])}
	allocs := testing.AllocsPerRun(100, func() {
		if err := (serverCodec{}).Unmarshal(data, target); err != nil || target.msg != nil {
			t.Fatalf("Unmarshal() = %v, msg %v: want the fast path", err, target.msg)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per sweep, want 0", allocs)
	}
}

// FuzzSweepFastPath: whatever the fast path takes, proto and the usual
// path take too, to the same state; what it declines changes nothing.
func FuzzSweepFastPath(f *testing.F) {
	for _, b := range sweepSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkSweep(t, data) })
}

// BenchmarkApplySweep applies 8-device sweeps round-robin over 1,000
// nodes, as the scheduler receives them (each node's state cold).
func BenchmarkApplySweep(b *testing.B) {
	srv, err := NewServer(ServerConfig{Authenticate: testAuth{}})
	if err != nil {
		b.Fatal(err)
	}
	h := testHello()
	h.IntervalMillis = 1000
	h.Devices = nil
	s := &telemetryv1.Samples{}
	for i := range 8 {
		u := fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i)
		h.Devices = append(h.Devices, &telemetryv1.Device{Uuid: u, MemoryTotalBytes: 80 << 30})
		s.Devices = append(s.Devices, &telemetryv1.DeviceSample{Uuid: u, SmUtilPercent: ptr(50.0), MemoryUsedBytes: ptr(uint64(i) << 30), PowerWatts: ptr(300.0), TemperatureCelsius: ptr(55.0)})
	}
	var targets []*recvTarget
	for i := range 1000 {
		h.NodeName = fmt.Sprintf("node-%04d", i)
		known, err := validateHello(h, 16)
		if err != nil {
			b.Fatal(err)
		}
		srv.hello(h.NodeName, uint64(i+1), func(error) {}, h)
		targets = append(targets, &recvTarget{s: srv, node: h.NodeName, gen: uint64(i + 1), known: &known})
	}
	data := marshal(b, &telemetryv1.AgentMessage{Seq: 2, Kind: &telemetryv1.AgentMessage_Samples{Samples: s}})
	b.Run("path=fast", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if !srv.applySweep(targets[i%len(targets)], data) {
				b.Fatal("the fast path declined a sweep")
			}
			i++
		}
	})
	b.Run("path=usual", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			t := targets[i%len(targets)]
			var m telemetryv1.AgentMessage
			if err := proto.Unmarshal(data, &m); err != nil {
				b.Fatal(err)
			}
			if err := srv.apply(t.node, t.gen, &m, t.known); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
