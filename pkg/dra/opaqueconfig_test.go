package dra

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpud/gpud/pkg/dra/prepared"
)

func TestDecodeGPUConfig(t *testing.T) {
	tests := []struct {
		name, raw string
		wantLimit string // "" no limit
		wantErr   string // "" accepted
	}{
		{name: "limit", raw: `{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memoryLimit":"30Gi"}`, wantLimit: "30Gi"},
		{name: "no limit", raw: `{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig"}`},
		{name: "limit in bytes", raw: `{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memoryLimit":1073741824}`, wantLimit: "1073741824"},
		{name: "unknown field", raw: `{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memoryLimitt":"30Gi"}`, wantErr: `unknown field "memoryLimitt"`},
		{name: "wrong apiVersion", raw: `{"apiVersion":"gpu.gpud.io/v1","kind":"GPUConfig","memoryLimit":"30Gi"}`, wantErr: `apiVersion "gpu.gpud.io/v1", want "gpu.gpud.io/v1alpha1"`},
		{name: "NVIDIA's apiVersion", raw: `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"}`, wantErr: "apiVersion"},
		{name: "no apiVersion", raw: `{"kind":"GPUConfig"}`, wantErr: "apiVersion"},
		{name: "wrong kind", raw: `{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GpuConfig"}`, wantErr: `kind "GpuConfig"`},
		{name: "zero limit", raw: `{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memoryLimit":"0"}`, wantErr: "memoryLimit 0"},
		{name: "negative limit", raw: `{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memoryLimit":"-1Gi"}`, wantErr: "memoryLimit -1Gi"},
		{name: "not a quantity", raw: `{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memoryLimit":"lots"}`, wantErr: "want {apiVersion"},
		{name: "not an object", raw: `[1]`, wantErr: "want {apiVersion"},
		{name: "data after", raw: `{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig"} {}`, wantErr: "data after"},
		{name: "too long", raw: `{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig"}` + strings.Repeat(" ", resourceapi.OpaqueParametersMaxLength), wantErr: "at most"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := DecodeGPUConfig([]byte(tc.raw))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("DecodeGPUConfig = %+v, %v; want an error containing %q", c, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if c.MemoryLimit != nil {
				got = c.MemoryLimit.String()
			}
			if got != tc.wantLimit {
				t.Fatalf("memoryLimit = %q, want %q", got, tc.wantLimit)
			}
		})
	}
}

// opaque is an allocation's opaque configuration for a driver.
func opaque(source resourceapi.AllocationConfigSource, driver, params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{Source: source, Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}}}}
}

func limitConfig(limit string) string {
	return `{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memoryLimit":"` + limit + `"}`
}

// TestPrepareMemoryLimit: a claim's opaque memoryLimit is recorded as its
// fraction's hard limit (the request stays the soft one), the claim's
// config wins over its class's, a config for another request or another
// driver does not apply, and MPS's pinned memory limit is the hard limit.
func TestPrepareMemoryLimit(t *testing.T) {
	e := newPrepEnv(t, "dgx-h100", nil)
	p := e.preparer()
	frac := func(uid, request string, configs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
		c := claim(uid, uid, alloc{request: request, pool: e.name, device: "gpu-0", shareID: "s-" + uid,
			capacity: map[resourceapi.QualifiedName]string{"memory": "20Gi"}})
		c.Status.Allocation.Devices.Config = configs
		return c
	}
	tests := []struct {
		name      string
		claim     *resourceapi.ResourceClaim
		wantLimit uint64
		wantEnv   string
	}{
		{name: "claim limit", claim: frac("a", "gpu", opaque(resourceapi.AllocationConfigSourceClaim, DriverName, limitConfig("30Gi"))),
			wantLimit: 30 << 30, wantEnv: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=30720M"},
		{name: "claim over class", claim: frac("b", "gpu",
			opaque(resourceapi.AllocationConfigSourceClass, DriverName, limitConfig("25Gi")),
			opaque(resourceapi.AllocationConfigSourceClaim, DriverName, limitConfig("24Gi"), "gpu")),
			wantLimit: 24 << 30, wantEnv: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=24576M"},
		{name: "subrequest", claim: frac("c", "gpu/small", opaque(resourceapi.AllocationConfigSourceClaim, DriverName, limitConfig("21Gi"), "gpu")),
			wantLimit: 21 << 30, wantEnv: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=21504M"},
		{name: "other request and other driver", claim: frac("d", "gpu",
			opaque(resourceapi.AllocationConfigSourceClaim, DriverName, limitConfig("30Gi"), "other"),
			opaque(resourceapi.AllocationConfigSourceClaim, "gpu.nvidia.com", `{"kind":"GpuConfig"}`)),
			wantEnv: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := prepareOne(t, p, tc.claim); err != nil {
				t.Fatal(err)
			}
			cp, err := prepared.Load(e.stateDir)
			if err != nil {
				t.Fatal(err)
			}
			d := cp.Claims[tc.claim.UID].Devices
			if len(d) != 1 || d[0].MemoryBytes != 20<<30 || d[0].MemoryLimitBytes != tc.wantLimit {
				t.Fatalf("checkpoint devices = %+v, want request 20 GiB, limit %d", d, tc.wantLimit)
			}
			uid := string(tc.claim.UID)
			env := readSpec(t, e.cdiDir, uid).GetDevice(uid + "-gpu-0-s-" + uid).ContainerEdits.Env
			if !slices.Contains(env, tc.wantEnv) {
				t.Errorf("env = %v, want %s", env, tc.wantEnv)
			}
			if err := unprepareOne(t, p, uid); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPrepareRefusesBadConfig: a bad opaque configuration fails prepare
// with an error naming the claim, the configuration and the field, and
// leaves no CDI spec and no checkpoint entry.
func TestPrepareRefusesBadConfig(t *testing.T) {
	e := newPrepEnv(t, "dgx-h100", nil)
	p := e.preparer()
	withConfig := func(uid string, a alloc, configs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
		c := claim(uid, "claim-"+uid, a)
		c.Status.Allocation.Devices.Config = configs
		return c
	}
	fraction := alloc{pool: e.name, device: "gpu-0", shareID: "s", capacity: map[resourceapi.QualifiedName]string{"memory": "20Gi"}}
	claimCfg := func(params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
		return opaque(resourceapi.AllocationConfigSourceClaim, DriverName, params, requests...)
	}
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  []string
	}{
		{name: "limit below request", claim: withConfig("lo", fraction, claimCfg(limitConfig("10Gi"))),
			want: []string{"claim ns/claim-lo", "opaque config 0 of the allocation (from the claim, all requests)", "memoryLimit 10Gi", "below its memory request of 21474836480 bytes"}},
		{name: "limit above GPU", claim: withConfig("hi", fraction, claimCfg(limitConfig("81Gi"), "gpu")),
			want: []string{"claim ns/claim-hi", "requests gpu", "memoryLimit 81Gi", "more than device \"gpu-0\" has"}},
		{name: "unknown field", claim: withConfig("uf", fraction, claimCfg(`{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memLimit":"30Gi"}`)),
			want: []string{"claim ns/claim-uf", `unknown field "memLimit"`}},
		{name: "wrong apiVersion", claim: withConfig("av", fraction, claimCfg(`{"apiVersion":"gpu.gpud.io/v2","kind":"GPUConfig","memoryLimit":"30Gi"}`)),
			want: []string{"claim ns/claim-av", `apiVersion "gpu.gpud.io/v2"`}},
		{name: "bad config for another request", claim: withConfig("or", fraction, claimCfg(`{"kind":"GPUConfig"}`, "other")),
			want: []string{"claim ns/claim-or", "requests other", "apiVersion"}},
		{name: "bad config from the class", claim: withConfig("cl", fraction, opaque(resourceapi.AllocationConfigSourceClass, DriverName, `{}`)),
			want: []string{"claim ns/claim-cl", "from the device class", "apiVersion"}},
		{name: "limit on a MIG device", claim: withConfig("mg", alloc{pool: e.name, device: "gpu-0-mig-1g10gb-0"}, claimCfg(limitConfig("10Gi"))),
			want: []string{"claim ns/claim-mg", "is a MIG device"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := prepareOne(t, p, tc.claim)
			if !errors.Is(err, ErrBadConfig) {
				t.Fatalf("err = %v, want ErrBadConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want it to contain %q", err, w)
				}
			}
		})
	}
	if n := len(p.Prepared()); n != 0 {
		t.Errorf("%d claims left in the checkpoint by refused configs", n)
	}
	if cp, err := prepared.Load(e.stateDir); err != nil || len(cp.Claims) != 0 {
		t.Errorf("checkpoint on disk = %+v, %v; want no claims", cp, err)
	}
	if entries, _ := os.ReadDir(e.cdiDir); len(entries) != 0 {
		t.Errorf("CDI specs left by refused configs: %v", entries)
	}
}

// FuzzDecodeGPUConfig: any parameters either decode to a config of this
// driver's apiVersion and kind with a positive limit, or are refused;
// never a panic.
func FuzzDecodeGPUConfig(f *testing.F) {
	f.Add([]byte(limitConfig("30Gi")))
	f.Add([]byte(`{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig"}`))
	f.Add([]byte(`{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memoryLimit":1e3}`))
	f.Add([]byte(`{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memoryLimit":"-1"}`))
	f.Add([]byte(`{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","x":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := DecodeGPUConfig(raw)
		if err != nil {
			return
		}
		if c.APIVersion != ConfigAPIVersion || c.Kind != ConfigKindGPU {
			t.Fatalf("accepted %+v", c)
		}
		if c.MemoryLimit != nil {
			if v, ok := c.MemoryLimit.AsInt64(); !ok || v <= 0 {
				t.Fatalf("accepted memoryLimit %s", c.MemoryLimit.String())
			}
		}
	})
}
