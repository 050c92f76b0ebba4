package stream

import (
	"math"
	"time"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
)

// The server's receive path. Nearly every message is a sweep of samples of
// the devices the Hello listed, with no processes or claims; decoding it
// as an AgentMessage costs some 50 allocations (each optional value is
// one), a quarter of the server's CPU at scale in garbage collection. The
// server's codec decodes such a message straight from the wire into the
// node's state, allocating nothing, and anything else (the Hello, events,
// processes, claims, unknown fields, a value out of bounds, an unknown
// device) as an AgentMessage, which the usual path validates and applies.

var protoCodec = encoding.GetCodecV2(protocodec.Name)

// serverCodec is the server's gRPC codec: the proto codec, except that a
// [recvTarget] takes the sweep fast path.
type serverCodec struct{}

func (serverCodec) Name() string { return protocodec.Name }

func (serverCodec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec.Marshal(v) }

func (serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	t, ok := v.(*recvTarget)
	if !ok {
		return protoCodec.Unmarshal(data, v)
	}
	t.msg = nil
	if t.known != nil && len(data) == 1 && t.s.applySweep(t, data[0].ReadOnlyData()) {
		return nil
	}
	t.msg = &telemetryv1.AgentMessage{}
	return protoCodec.Unmarshal(data, t.msg)
}

// recvTarget is what a stream receives into: msg is the message, or nil
// when a sweep was applied on the fast path.
type recvTarget struct {
	s     *Server
	node  string
	gen   uint64
	known *map[string]bool // nil before the Hello: no fast path
	msg   *telemetryv1.AgentMessage
}

// sweepMaxDevices bounds the devices of a sweep on the fast path (the
// decoded values sit on the stack); larger sweeps take the usual path.
const sweepMaxDevices = 16

// sweepSample is one decoded DeviceSample; uuid points into the message.
type sweepSample struct {
	uuid                          []byte
	smUtil, power, temp           float64
	memUsed                       uint64
	smUtilOK, memOK, powerOK, tOK bool // the value was sent
}

// applySweep decodes b as an AgentMessage that is a sweep of samples of
// known devices, within bounds, and applies it; it reports false (having
// changed nothing) for any other message.
func (s *Server) applySweep(t *recvTarget, b []byte) bool {
	var devs [sweepMaxDevices]sweepSample
	n, ok := decodeSweep(b, &devs)
	if !ok || n > len(*t.known) {
		return false
	}
	for i := range devs[:n] {
		d := &devs[i]
		if !(*t.known)[string(d.uuid)] ||
			(d.smUtilOK && !finite(d.smUtil, 0, 100)) ||
			(d.powerOK && !finite(d.power, 0, 100000)) ||
			(d.tOK && !finite(d.temp, -273.15, 1000)) ||
			d.memUsed > maxMemoryBytes {
			return false // the usual path says why
		}
	}
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.nodes[t.node]
	if ns == nil || ns.gen != t.gen {
		return true // replaced by a newer stream; it ends soon
	}
	ns.received, ns.last = now, time.Now()
	for i := range devs[:n] {
		d := &devs[i]
		ds := ns.devices[string(d.uuid)]
		if ds == nil {
			continue
		}
		if d.memOK {
			ds.memUsed = d.memUsed
		}
		if d.smUtilOK {
			ds.smUtil = d.smUtil
		}
		ds.claimMem, ds.podMem = nil, nil
	}
	return true
}

// decodeSweep decodes an AgentMessage holding one Samples of at most
// sweepMaxDevices DeviceSamples with no processes or claims, and nothing
// else but its seq; ok is false for anything else.
func decodeSweep(b []byte, devs *[sweepMaxDevices]sweepSample) (n int, ok bool) {
	var samples []byte
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, false
		}
		b = b[l:]
		switch {
		case num == 1 && typ == protowire.VarintType: // seq: samples are not acknowledged
			_, l = protowire.ConsumeVarint(b)
		case num == 3 && typ == protowire.BytesType && samples == nil:
			samples, l = protowire.ConsumeBytes(b)
		default:
			return 0, false
		}
		if l < 0 {
			return 0, false
		}
		b = b[l:]
	}
	if samples == nil {
		return 0, false
	}
	for b = samples; len(b) > 0; {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, false
		}
		b = b[l:]
		switch {
		case num == 1 && typ == protowire.VarintType: // taken_unix_nanos
			_, l = protowire.ConsumeVarint(b)
		case num == 2 && typ == protowire.BytesType:
			var d []byte
			d, l = protowire.ConsumeBytes(b)
			if l < 0 || n == sweepMaxDevices || !decodeDeviceSample(d, &devs[n]) {
				return 0, false
			}
			n++
		default:
			return 0, false
		}
		if l < 0 {
			return 0, false
		}
		b = b[l:]
	}
	return n, true
}

// decodeDeviceSample decodes a DeviceSample without processes or claims
// (a repeated scalar field keeps its last value, as proto does).
func decodeDeviceSample(b []byte, d *sweepSample) bool {
	*d = sweepSample{}
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false
		}
		b = b[l:]
		var v uint64
		switch {
		case num == 1 && typ == protowire.BytesType:
			d.uuid, l = protowire.ConsumeBytes(b)
		case num == 3 && typ == protowire.VarintType:
			v, l = protowire.ConsumeVarint(b)
			d.memUsed, d.memOK = v, true
		case (num == 2 || num == 4 || num == 5) && typ == protowire.Fixed64Type:
			v, l = protowire.ConsumeFixed64(b)
			f := math.Float64frombits(v)
			switch num {
			case 2:
				d.smUtil, d.smUtilOK = f, true
			case 4:
				d.power, d.powerOK = f, true
			case 5:
				d.temp, d.tOK = f, true
			}
		default:
			return false
		}
		if l < 0 {
			return false
		}
		b = b[l:]
	}
	return d.uuid != nil
}
