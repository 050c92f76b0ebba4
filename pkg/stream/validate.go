package stream

import (
	"fmt"
	"math"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
)

// Bounds on what an agent may send. MaxMessageBytes is also the gRPC
// receive limit.
const (
	MaxMessageBytes       = 1 << 20
	DefaultMaxDevices     = 512
	maxProcessesPerDevice = 1024
	maxClaimsPerDevice    = 1024
	maxUUIDLen            = 128
	maxTextLen            = 1024
	// maxMemoryBytes is 1 PiB: far above any device.
	maxMemoryBytes = 1 << 50
)

// validNodeName checks a node name as the API server does.
func validNodeName(n string) error {
	if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
		return fmt.Errorf("%q: %s", trunc(n), strings.Join(msgs, "; "))
	}
	return nil
}

func trunc(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalidMessage)
}

// validateHello checks a Hello; it returns the device UUIDs it lists.
func validateHello(h *telemetryv1.Hello, maxDevices int) (map[string]bool, error) {
	if err := validNodeName(h.GetNodeName()); err != nil {
		return nil, invalid("hello node name %v", err)
	}
	if len(h.GetAgentVersion()) > maxTextLen {
		return nil, invalid("hello agent version longer than %d bytes", maxTextLen)
	}
	if iv := h.GetIntervalMillis(); iv < uint32(MinInterval.Milliseconds()) || iv > uint32(MaxInterval.Milliseconds()) {
		return nil, invalid("hello interval %dms: want %s to %s", iv, MinInterval, MaxInterval)
	}
	return validateDevices(h.GetDevices(), maxDevices)
}

func validateDevices(devs []*telemetryv1.Device, maxDevices int) (map[string]bool, error) {
	if len(devs) > maxDevices {
		return nil, invalid("%d devices: at most %d", len(devs), maxDevices)
	}
	known := make(map[string]bool, len(devs))
	for _, d := range devs {
		if err := validUUID(d.GetUuid()); err != nil {
			return nil, err
		}
		if known[d.GetUuid()] {
			return nil, invalid("device %s listed twice", d.GetUuid())
		}
		known[d.GetUuid()] = true
		if len(d.GetParentUuid()) > maxUUIDLen || len(d.GetModel()) > maxTextLen || len(d.GetMigProfile()) > maxTextLen ||
			len(d.GetSharing()) > maxTextLen || len(d.GetHealthReason()) > maxTextLen {
			return nil, invalid("device %s: a text field is longer than %d bytes", d.GetUuid(), maxTextLen)
		}
		if d.GetMemoryTotalBytes() > maxMemoryBytes {
			return nil, invalid("device %s: memory %d bytes is above 1 PiB", d.GetUuid(), d.GetMemoryTotalBytes())
		}
		if _, ok := telemetryv1.Health_name[int32(d.GetHealth())]; !ok {
			return nil, invalid("device %s: unknown health %d", d.GetUuid(), d.GetHealth())
		}
	}
	return known, nil
}

func validUUID(u string) error {
	if u == "" || len(u) > maxUUIDLen {
		return invalid("device UUID %q: want 1 to %d bytes", trunc(u), maxUUIDLen)
	}
	return nil
}

// finite reports whether v is a number in [lo, hi].
func finite(v, lo, hi float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= lo && v <= hi
}

// validateSamples checks a sweep against the devices of the Hello.
func validateSamples(s *telemetryv1.Samples, known map[string]bool) error {
	if len(s.GetDevices()) > len(known) {
		return invalid("samples of %d devices, the hello listed %d", len(s.GetDevices()), len(known))
	}
	for _, d := range s.GetDevices() {
		u := d.GetUuid()
		if !known[u] {
			return invalid("sample of device %q the hello did not list", trunc(u))
		}
		if d.SmUtilPercent != nil && !finite(d.GetSmUtilPercent(), 0, 100) {
			return invalid("device %s: SM utilization %v: want 0 to 100", u, d.GetSmUtilPercent())
		}
		if d.PowerWatts != nil && !finite(d.GetPowerWatts(), 0, 100000) {
			return invalid("device %s: power %v W: want 0 to 100000", u, d.GetPowerWatts())
		}
		if d.TemperatureCelsius != nil && !finite(d.GetTemperatureCelsius(), -273.15, 1000) {
			return invalid("device %s: temperature %v C: want -273.15 to 1000", u, d.GetTemperatureCelsius())
		}
		if d.GetMemoryUsedBytes() > maxMemoryBytes {
			return invalid("device %s: memory used %d bytes is above 1 PiB", u, d.GetMemoryUsedBytes())
		}
		if len(d.GetProcesses()) > maxProcessesPerDevice || len(d.GetClaims()) > maxClaimsPerDevice {
			return invalid("device %s: more than %d processes or %d claims", u, maxProcessesPerDevice, maxClaimsPerDevice)
		}
		for _, p := range d.GetProcesses() {
			if p.GetUsedBytes() > maxMemoryBytes || len(p.GetPodUid()) > maxUUIDLen || len(p.GetNamespace()) > maxTextLen ||
				len(p.GetPod()) > maxTextLen || len(p.GetContainer()) > maxTextLen {
				return invalid("device %s: process %d out of bounds", u, p.GetPid())
			}
		}
		for _, c := range d.GetClaims() {
			if c.GetClaimUid() == "" || len(c.GetClaimUid()) > maxUUIDLen || c.GetUsedBytes() > maxMemoryBytes {
				return invalid("device %s: claim memory entry out of bounds", u)
			}
		}
	}
	return nil
}

// validateEvent checks an event; devices of a MIG layout or sharing event
// replace the known ones, which it returns.
func validateEvent(e *telemetryv1.Event, known map[string]bool, maxDevices int) (map[string]bool, error) {
	if _, ok := telemetryv1.Event_Kind_name[int32(e.GetKind())]; !ok || e.GetKind() == telemetryv1.Event_KIND_UNSPECIFIED {
		return nil, invalid("event kind %d unknown", e.GetKind())
	}
	if _, ok := telemetryv1.Health_name[int32(e.GetHealth())]; !ok {
		return nil, invalid("event health %d unknown", e.GetHealth())
	}
	if len(e.GetReason()) > maxTextLen {
		return nil, invalid("event reason longer than %d bytes", maxTextLen)
	}
	switch e.GetKind() {
	case telemetryv1.Event_KIND_MIG_LAYOUT, telemetryv1.Event_KIND_SHARING:
		if len(e.GetDevices()) == 0 {
			return known, nil
		}
		return validateDevices(e.GetDevices(), maxDevices)
	}
	if !known[e.GetDeviceUuid()] {
		return nil, invalid("event on device %q the hello did not list", trunc(e.GetDeviceUuid()))
	}
	if len(e.GetDevices()) > 0 {
		return nil, invalid("device list on a %s event", e.GetKind())
	}
	return known, nil
}
