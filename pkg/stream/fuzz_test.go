package stream

import (
	"math"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
)

// FuzzAgentMessage feeds arbitrary wire bytes through the server's
// validation and state: nothing panics, and what is accepted is bounded
// and finite in the state the scheduler reads.
func FuzzAgentMessage(f *testing.F) {
	h := testHello()
	h.NodeName, h.IntervalMillis = "node-a", 1000
	for _, m := range []*telemetryv1.AgentMessage{
		{Seq: 1, Kind: &telemetryv1.AgentMessage_Hello{Hello: h}},
		{Seq: 2, Kind: &telemetryv1.AgentMessage_Samples{Samples: testSamples(1 << 30)}},
		{Seq: 3, Kind: &telemetryv1.AgentMessage_Event{Event: &telemetryv1.Event{Kind: telemetryv1.Event_KIND_XID, DeviceUuid: testGPU, Xid: 79, Health: telemetryv1.Health_HEALTH_LOST}}},
		{Seq: 4, Kind: &telemetryv1.AgentMessage_Event{Event: &telemetryv1.Event{Kind: telemetryv1.Event_KIND_MIG_LAYOUT, Devices: h.Devices}}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m telemetryv1.AgentMessage
		if err := proto.Unmarshal(data, &m); err != nil {
			return
		}
		now := time.Unix(1000, 0)
		srv, err := NewServer(ServerConfig{Authenticate: testAuth{}, MaxDevices: 16, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		hello := m.GetHello()
		if hello == nil {
			hello = h
		}
		known, err := validateHello(hello, 16)
		if err != nil {
			return
		}
		srv.hello(hello.GetNodeName(), 1, func(error) {}, hello)
		if m.GetHello() == nil {
			_ = srv.apply(hello.GetNodeName(), 1, &m, &known)
		}
		for _, n := range srv.Telemetry(now, 3) {
			if len(n.Devices) > 16 {
				t.Fatalf("%d devices kept, bound 16", len(n.Devices))
			}
			for u, d := range n.Devices {
				if math.IsNaN(d.SMUtilPercent) || d.SMUtilPercent < 0 || d.SMUtilPercent > 100 || len(u) > maxUUIDLen {
					t.Fatalf("device %q kept out of bounds: %+v", u, d)
				}
			}
		}
	})
}

// FuzzBearerToken: any authorization metadata either yields a token in
// the JWT alphabet of at most MaxTokenBytes, or an error; never a panic.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.sig", "Bearer ", "bearer x", "Bearer a b", "Bearer \x00", ""} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, v string, twice bool) {
		md := metadata.Pairs(authorizationKey, v)
		if twice {
			md.Append(authorizationKey, v)
		}
		tok, err := bearerToken(md)
		if err != nil {
			return
		}
		if twice || "Bearer "+tok != v || validToken(tok) != nil {
			t.Fatalf("bearerToken(%q, twice %v) = %q", v, twice, tok)
		}
	})
}
