package dra

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The opaque device configuration this driver takes: a claim (or its
// DeviceClass) passes it in spec.devices.config[].opaque with driver
// gpu.gpud.io, as NVIDIA's DRA driver takes its GpuConfig.
const (
	// ConfigAPIVersion is the only apiVersion of [GPUConfig] so far.
	ConfigAPIVersion = "gpu.gpud.io/v1alpha1"
	// ConfigKindGPU is [GPUConfig]'s kind.
	ConfigKindGPU = "GPUConfig"
)

// ErrBadConfig is wrapped when a claim's opaque configuration for this
// driver cannot be decoded or does not fit the devices it applies to.
var ErrBadConfig = errors.New("dra: bad opaque device configuration")

// GPUConfig configures the GPUs of the requests it applies to.
//
//	apiVersion: gpu.gpud.io/v1alpha1
//	kind: GPUConfig
//	memoryLimit: 30Gi
type GPUConfig struct {
	metav1.TypeMeta `json:",inline"`
	// MemoryLimit is the hard limit of a fraction's GPU memory: a
	// container may borrow up to it above its request (the claim's
	// consumed memory capacity, the soft limit, which is what is
	// guaranteed). At least the request and at most the GPU's memory;
	// nil means the request (no borrowing). Only whole GPUs take it: a
	// MIG device's memory is its slice's.
	MemoryLimit *resource.Quantity `json:"memoryLimit,omitempty"`
}

// DecodeGPUConfig decodes opaque parameters strictly: the apiVersion and
// kind must be this driver's, and unknown fields, values of the wrong
// type and data after the object are refused, so a misspelt field is an
// error rather than a silently missing limit.
func DecodeGPUConfig(raw []byte) (GPUConfig, error) {
	if len(raw) > resourceapi.OpaqueParametersMaxLength {
		return GPUConfig{}, fmt.Errorf("%d bytes, at most %d", len(raw), resourceapi.OpaqueParametersMaxLength)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var c GPUConfig
	if err := dec.Decode(&c); err != nil {
		return GPUConfig{}, fmt.Errorf("want {apiVersion: %s, kind: %s, memoryLimit: <quantity>}: %w", ConfigAPIVersion, ConfigKindGPU, err)
	}
	if dec.More() {
		return GPUConfig{}, errors.New("data after the object")
	}
	if c.APIVersion != ConfigAPIVersion {
		return GPUConfig{}, fmt.Errorf("apiVersion %q, want %q", c.APIVersion, ConfigAPIVersion)
	}
	if c.Kind != ConfigKindGPU {
		return GPUConfig{}, fmt.Errorf("kind %q, want %q", c.Kind, ConfigKindGPU)
	}
	if c.MemoryLimit != nil {
		if v, ok := c.MemoryLimit.AsInt64(); !ok || v <= 0 {
			return GPUConfig{}, fmt.Errorf("memoryLimit %s: want a positive number of bytes", c.MemoryLimit.String())
		}
	}
	return c, nil
}

// claimConfig is one decoded configuration of this driver and the
// requests it applies to (none: all).
type claimConfig struct {
	index    int
	source   resourceapi.AllocationConfigSource
	requests []string
	cfg      GPUConfig
}

// describe names the configuration in errors.
func (c claimConfig) describe() string {
	from := "the claim"
	if c.source == resourceapi.AllocationConfigSourceClass {
		from = "the device class"
	}
	reqs := "all requests"
	if len(c.requests) > 0 {
		reqs = "requests " + strings.Join(c.requests, ",")
	}
	return fmt.Sprintf("opaque config %d of the allocation (from %s, %s)", c.index, from, reqs)
}

// applies reports whether the configuration applies to an allocation
// result's request: every request when it names none; a main request
// also covers its subrequests (<main>/<sub>).
func (c claimConfig) applies(request string) bool {
	if len(c.requests) == 0 {
		return true
	}
	for _, r := range c.requests {
		if r == request || strings.HasPrefix(request, r+"/") {
			return true
		}
	}
	return false
}

// claimConfigs decodes every opaque configuration of this driver in the
// claim's allocation, in its order (the class's, then the claim's), and
// refuses the first bad one, whether or not it applies to a device.
func claimConfigs(alloc *resourceapi.AllocationResult) ([]claimConfig, error) {
	var out []claimConfig
	for i, ac := range alloc.Devices.Config {
		if ac.Opaque == nil || ac.Opaque.Driver != DriverName {
			continue
		}
		c := claimConfig{index: i, source: ac.Source, requests: ac.Requests}
		cfg, err := DecodeGPUConfig(ac.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrBadConfig, c.describe(), err)
		}
		c.cfg = cfg
		out = append(out, c)
	}
	return out, nil
}

// memoryLimit is the hard memory limit the configurations give a device
// serving request: the last configuration that applies to the request
// wins (the claim's over its class's), as Kubernetes orders them; 0 when
// none sets one. It is checked against the device: at least its request
// (memBytes) and at most its memory, and only on a whole GPU.
func memoryLimit(configs []claimConfig, request string, d PreparedDevice) (uint64, error) {
	var last *claimConfig
	for i := range configs {
		if configs[i].applies(request) {
			last = &configs[i]
		}
	}
	if last == nil || last.cfg.MemoryLimit == nil {
		return 0, nil
	}
	q := last.cfg.MemoryLimit
	v, _ := q.AsInt64() // positive: DecodeGPUConfig checked it
	limit := uint64(v)
	switch {
	case d.Device.Type != TypeGPU:
		return 0, fmt.Errorf("%w: %s: memoryLimit %s for request %q: device %q is a MIG device, whose memory is its slice's; set memoryLimit only for requests of GPU fractions",
			ErrBadConfig, last.describe(), q.String(), request, d.Device.Name)
	case limit < d.MemoryBytes:
		return 0, fmt.Errorf("%w: %s: memoryLimit %s (%d bytes) for request %q is below its memory request of %d bytes on device %q; set it to at least the request, or leave it out",
			ErrBadConfig, last.describe(), q.String(), limit, request, d.MemoryBytes, d.Device.Name)
	case limit > d.Device.MemoryBytes:
		return 0, fmt.Errorf("%w: %s: memoryLimit %s (%d bytes) for request %q is more than device %q has (%d bytes)",
			ErrBadConfig, last.describe(), q.String(), limit, request, d.Device.Name, d.Device.MemoryBytes)
	}
	return limit, nil
}
