package nodelabels

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/simnode"
)

const layouts = `version: v1
mig-configs:
  all-1g:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  all-1g-a100:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
  mixed:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.10gb": 3, "4g.40gb": 1}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  half:
    - devices: [0, 1, 2, 3]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
`

// simInventory reads a simulated node as the agent does, after applying
// MIG layout (when not empty) through the one MIG service, resetting GPUs
// whose mode change needs it.
func simInventory(t testing.TB, profile, layout string) gpu.Inventory {
	t.Helper()
	n := simnode.NewBuiltin(profile)
	t.Cleanup(n.Close)
	if layout != "" {
		f, err := mig.ParseLayoutFile([]byte(layouts))
		if err != nil {
			t.Fatal(err)
		}
		svc, err := mig.NewService(mig.ServiceConfig{Lib: n, Processes: discovery.ProcessReader{Lib: n},
			Applier: mig.NewApplier(n, nil, mig.WithResetter(n.ResetGPU))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Apply(context.Background(), f, layout, false); err != nil {
			t.Fatalf("apply %s on %s: %v", layout, profile, err)
		}
	}
	inv, err := discovery.New(n, profile, nil).Inventory()
	if err != nil {
		t.Fatalf("discovery of %s: %v", profile, err)
	}
	return inv
}

// format prints labels one per line, sorted, for the log and for diffs.
func format(l map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(l)) {
		b.WriteString("\n  " + k + "=" + l[k])
	}
	return b.String()
}

func checkValid(t *testing.T, l map[string]string) {
	t.Helper()
	for k, v := range l {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			t.Errorf("key %q invalid: %v", k, msgs)
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			t.Errorf("value %s=%q invalid: %v", k, v, msgs)
		}
	}
}

func TestComputeSimulatedNodes(t *testing.T) {
	common := map[string]string{
		Present: "true", GPUModels: "1",
		DriverMajor: "550", DriverMinor: "54", DriverRev: "15",
		DriverVerMajor: "550", DriverVerMinor: "54", DriverVerRev: "15", DriverVerFull: "550.54.15",
		RuntimeMajor: "12", RuntimeMinor: "4", RuntimeVerMajor: "12", RuntimeVerMinor: "4", RuntimeVerFull: "12.4",
		GPUNUMANodes: "0.1",
	}
	with := func(extra map[string]string) map[string]string {
		out := maps.Clone(common)
		maps.Copy(out, extra)
		return out
	}
	for _, tc := range []struct {
		name, profile, layout string
		opts                  Options
		want                  map[string]string
		warn                  string
	}{
		{name: "dgx-h100", profile: "dgx-h100", want: with(map[string]string{
			Product: "NVIDIA-H100-80GB-HBM3", Count: "8", Memory: "81920", Family: "hopper",
			ComputeMajor: "9", ComputeMinor: "0", MIGCapable: "true",
			NVLinkDomains: "1", NVLinkDomainGPUs: "8",
		})},
		{name: "dgx-a100", profile: "dgx-a100", opts: Options{MIGStrategy: StrategyNone}, want: with(map[string]string{
			Product: "NVIDIA-A100-SXM4-40GB", Count: "8", Memory: "40960", Family: "ampere",
			ComputeMajor: "8", ComputeMinor: "0", MIGCapable: "true",
			NVLinkDomains: "1", NVLinkDomainGPUs: "8",
		})},
		{name: "pcie-l40s", profile: "pcie-l40s", opts: Options{MIGStrategy: StrategyMixed}, want: with(map[string]string{
			Product: "NVIDIA-L40S", Count: "4", Memory: "46068", Family: "ada-lovelace",
			ComputeMajor: "8", ComputeMinor: "9", MIGCapable: "false", MIGStrategy: "mixed",
			NVLinkDomains: "0",
		})},
		{name: "h100 single all-1g", profile: "dgx-h100", layout: "all-1g", opts: Options{MIGStrategy: StrategySingle, MIGConfigState: StateSuccess},
			want: with(map[string]string{
				Product: "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", Count: "56", Memory: "10240", Family: "hopper",
				"nvidia.com/gpu.multiprocessors": "16", "nvidia.com/gpu.slices.gi": "1", "nvidia.com/gpu.slices.ci": "1",
				ComputeMajor: "9", ComputeMinor: "0", MIGCapable: "true", MIGStrategy: "single", MIGConfigState: "success",
				NVLinkDomains: "1", NVLinkDomainGPUs: "8",
			})},
		{name: "a100 single all-1g", profile: "dgx-a100", layout: "all-1g-a100", opts: Options{MIGStrategy: StrategySingle},
			want: with(map[string]string{
				Product: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", Count: "56", Memory: "4864", Family: "ampere",
				"nvidia.com/gpu.multiprocessors": "14", "nvidia.com/gpu.slices.gi": "1", "nvidia.com/gpu.slices.ci": "1",
				ComputeMajor: "8", ComputeMinor: "0", MIGCapable: "true", MIGStrategy: "single",
				NVLinkDomains: "1", NVLinkDomainGPUs: "8",
			})},
		{name: "h100 single half: invalid", profile: "dgx-h100", layout: "half", opts: Options{MIGStrategy: StrategySingle},
			warn: "MIG enabled and disabled",
			want: with(map[string]string{
				Product: "NVIDIA-H100-80GB-HBM3-MIG-INVALID", Count: "0", Memory: "0", Family: "hopper",
				ComputeMajor: "9", ComputeMinor: "0", MIGCapable: "true", MIGStrategy: "single",
				NVLinkDomains: "1", NVLinkDomainGPUs: "8",
			})},
		{name: "h100 mixed", profile: "dgx-h100", layout: "mixed", opts: Options{MIGStrategy: StrategyMixed, MIGConfigState: StatePending},
			want: with(map[string]string{
				Product: "NVIDIA-H100-80GB-HBM3", Count: "8", Memory: "81920", Family: "hopper",
				ComputeMajor: "9", ComputeMinor: "0", MIGCapable: "true", MIGStrategy: "mixed", MIGConfigState: "pending",
				"nvidia.com/mig-1g.10gb.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "nvidia.com/mig-1g.10gb.count": "3",
				"nvidia.com/mig-1g.10gb.memory": "10240", "nvidia.com/mig-1g.10gb.multiprocessors": "16",
				"nvidia.com/mig-1g.10gb.slices.gi": "1", "nvidia.com/mig-1g.10gb.slices.ci": "1",
				"nvidia.com/mig-4g.40gb.product": "NVIDIA-H100-80GB-HBM3-MIG-4g.40gb", "nvidia.com/mig-4g.40gb.count": "1",
				"nvidia.com/mig-4g.40gb.memory": "40960", "nvidia.com/mig-4g.40gb.multiprocessors": "64",
				"nvidia.com/mig-4g.40gb.slices.gi": "4", "nvidia.com/mig-4g.40gb.slices.ci": "4",
				"nvidia.com/mig-3g.40gb.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", "nvidia.com/mig-3g.40gb.count": "2",
				"nvidia.com/mig-3g.40gb.memory": "40960", "nvidia.com/mig-3g.40gb.multiprocessors": "48",
				"nvidia.com/mig-3g.40gb.slices.gi": "3", "nvidia.com/mig-3g.40gb.slices.ci": "3",
				NVLinkDomains: "1", NVLinkDomainGPUs: "8",
			})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := simInventory(t, tc.profile, tc.layout)
			r := Compute(inv, tc.opts)
			strategy := tc.opts.MIGStrategy
			if strategy == "" {
				strategy = "unset, as in DRA mode"
			}
			t.Logf("labels of simulated %s (mig-strategy %s):%s", tc.name, strategy, format(r.Labels))
			checkValid(t, r.Labels)
			if got, want := format(r.Labels), format(tc.want); got != want {
				t.Errorf("labels:\ngot:%s\nwant:%s", got, want)
			}
			if _, ok := r.Labels[Clique]; ok {
				t.Errorf("%s set without fabric information", Clique)
			}
			switch {
			case tc.warn == "" && len(r.Warnings) > 0:
				t.Errorf("warnings %q", r.Warnings)
			case tc.warn != "" && !strings.Contains(strings.Join(r.Warnings, "\n"), tc.warn):
				t.Errorf("warnings %q, want one with %q", r.Warnings, tc.warn)
			}
		})
	}
}

func TestComputeNoGPUs(t *testing.T) {
	if r := Compute(gpu.Inventory{Node: gpu.Node{DriverVersion: "550.54.15"}}, Options{MIGStrategy: StrategySingle}); len(r.Labels) != 0 {
		t.Errorf("labels on a node without GPUs: %v", r.Labels)
	}
}

// TestComputeMixedModels: the lowest-index GPU's model is labelled, with
// the count of GPUs of that model, and gpud.io/gpu-models says there are
// two; the result does not depend on inventory order.
func TestComputeMixedModels(t *testing.T) {
	inv := gpu.Inventory{GPUs: []gpu.GPU{
		{Index: 1, UUID: "b", Name: "NVIDIA L4", ComputeCapability: "8.9", MemoryBytes: 24 << 30, NUMANode: 1},
		{Index: 0, UUID: "a", Name: "NVIDIA H100 PCIe", ComputeCapability: "9.0", MemoryBytes: 80 << 30, NUMANode: -1},
		{Index: 2, UUID: "c", Name: "NVIDIA L4", ComputeCapability: "8.9", MemoryBytes: 24 << 30, NUMANode: 1},
	}}
	r := Compute(inv, Options{})
	want := map[string]string{Present: "true", GPUModels: "2", Product: "NVIDIA-H100-PCIe", Count: "1", Memory: "81920",
		Family: "hopper", ComputeMajor: "9", ComputeMinor: "0", MIGCapable: "false", NVLinkDomains: "0", GPUNUMANodes: "1"}
	if got := format(r.Labels); got != format(want) {
		t.Errorf("labels:%s\nwant:%s", got, format(want))
	}
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "NVIDIA L4") {
		t.Errorf("warnings %q, want one naming both models", r.Warnings)
	}
}

// TestComputeHostileInventory: whatever NVML reports, every label is valid.
func TestComputeHostileInventory(t *testing.T) {
	long := strings.Repeat("NVIDIA Super Long Product Name ", 5)
	inv := gpu.Inventory{
		Node: gpu.Node{DriverVersion: "550.54.15-custom+build", CUDADriverVersion: "12.x"},
		GPUs: []gpu.GPU{{Index: 0, UUID: "a", Name: " --" + long + "(rev/2) é\x00--", ComputeCapability: "10.0", MemoryBytes: 192 << 30,
			MIGCapable: true, MIGEnabled: true, NUMANode: 0, MIGDevices: []gpu.MIGDevice{{Profile: "1g.23gb+me", MemoryBytes: 23 << 30}}}},
	}
	r := Compute(inv, Options{MIGStrategy: StrategyMixed})
	checkValid(t, r.Labels)
	if p := r.Labels[Product]; len(p) < 60 || len(p) > 63 || !strings.HasPrefix(p, "NVIDIA-Super-Long") {
		t.Errorf("product %q: want GFD's sanitized name cut to at most 63 characters", p)
	}
	if r.Labels[Family] != "blackwell" {
		t.Errorf("family %q, want blackwell", r.Labels[Family])
	}
	if r.Labels["nvidia.com/mig-1g.23gb.me.count"] != "1" {
		t.Errorf("+me profile: labels%s", format(r.Labels))
	}
	// 550.54.15-custom+build is X.Y.Z, but its rev is no label value:
	// that label is dropped, the others stay.
	if _, ok := r.Labels[DriverRev]; ok || r.Labels[DriverMajor] != "550" {
		t.Errorf("driver labels:%s", format(r.Labels))
	}
	if _, ok := r.Labels[RuntimeMajor]; ok {
		t.Errorf("runtime labels from CUDA version 12.x")
	}
	if len(r.Warnings) == 0 {
		t.Errorf("no warnings for a hostile inventory")
	}
}

func TestSanitizeValue(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA H100 80GB HBM3":        "NVIDIA-H100-80GB-HBM3",
		"NVIDIA  A100-SXM4-40GB ":      "NVIDIA-A100-SXM4-40GB",
		"Tesla T4 (rev a1)":            "Tesla-T4-rev-a1",
		"-._x_.-":                      "x",
		"":                             "",
		"ü":                            "",
		strings.Repeat("a", 62) + ".b": strings.Repeat("a", 62) + ".",
	} {
		got := SanitizeValue(in)
		if len(validation.IsValidLabelValue(got)) > 0 {
			t.Errorf("SanitizeValue(%q) = %q: not a valid label value", in, got)
		}
		if in == strings.Repeat("a", 62)+".b" {
			want = strings.Repeat("a", 62)
		}
		if got != want {
			t.Errorf("SanitizeValue(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzSanitizeValue(f *testing.F) {
	for _, s := range []string{"NVIDIA H100 80GB HBM3", "", "-", strings.Repeat("x y", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v := SanitizeValue(s); len(validation.IsValidLabelValue(v)) > 0 {
			t.Errorf("SanitizeValue(%q) = %q: invalid", s, v)
		}
	})
}
