package deviceplugin

import (
	"maps"
	"slices"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/timeslice"
)

func TestBuild(t *testing.T) {
	mixedProfiles := func() gpu.Inventory {
		inv := synthInventory(2, 2)
		inv.GPUs[1].MIGDevices[0].Profile = "2g.20gb"
		return inv
	}
	tests := []struct {
		name      string
		inv       gpu.Inventory
		cfg       func(*Config)
		want      map[string]int // resource -> devices
		wantWarn  string
		unhealthy map[string]int
	}{
		{name: "whole gpus", inv: synthInventory(8, 0), want: map[string]int{"nvidia.com/gpu": 8}},
		{name: "none ignores MIG", inv: synthInventory(8, 7), want: map[string]int{"nvidia.com/gpu": 8}},
		{name: "single advertises slices as gpu", inv: synthInventory(8, 7), cfg: func(c *Config) { c.MIGStrategy = MIGSingle },
			want: map[string]int{"nvidia.com/gpu": 56}},
		{name: "single without MIG advertises gpus", inv: synthInventory(4, 0), cfg: func(c *Config) { c.MIGStrategy = MIGSingle },
			want: map[string]int{"nvidia.com/gpu": 4}},
		{name: "single with two profiles advertises none", inv: mixedProfiles(), cfg: func(c *Config) { c.MIGStrategy = MIGSingle },
			want: map[string]int{}, wantWarn: "use --mig-strategy mixed"},
		{name: "mixed", inv: func() gpu.Inventory {
			inv := synthInventory(3, 2)
			inv.GPUs[2].MIGEnabled, inv.GPUs[2].MIGDevices = false, nil
			return inv
		}(), cfg: func(c *Config) { c.MIGStrategy = MIGMixed },
			want: map[string]int{"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 4}},
		{name: "per-GPU replicas renamed", inv: synthInventory(4, 0), cfg: func(c *Config) {
			c.Sharing = timeslice.Config{Devices: map[string]timeslice.Sharing{"0": {Replicas: 4}, "GPU-0003": {Replicas: 16}}}
		}, want: map[string]int{"nvidia.com/gpu": 2, "nvidia.com/gpu.shared": 20}},
		{name: "replicas not renamed", inv: synthInventory(2, 0), cfg: func(c *Config) {
			c.Sharing = timeslice.Config{Default: &timeslice.Sharing{Replicas: 3}}
			c.RenameShared = false
		}, want: map[string]int{"nvidia.com/gpu": 6}},
		{name: "shared MIG slices", inv: synthInventory(1, 2), cfg: func(c *Config) {
			c.MIGStrategy = MIGMixed
			c.Sharing = timeslice.Config{Devices: map[string]timeslice.Sharing{"MIG-0000-1": {Replicas: 2}}}
		}, want: map[string]int{"nvidia.com/mig-1g.10gb": 1, "nvidia.com/mig-1g.10gb.shared": 2}},
		{name: "sharing that does not fit stays whole", inv: synthInventory(1, 0), cfg: func(c *Config) {
			c.Sharing = timeslice.Config{Devices: map[string]timeslice.Sharing{"0": {Shares: []timeslice.Share{{MemoryMiB: 90000}}}}}
		}, want: map[string]int{"nvidia.com/gpu": 1}, wantWarn: "GPU-0000 advertised unshared"},
		{name: "custom prefix", inv: synthInventory(1, 0), cfg: func(c *Config) { c.ResourcePrefix = "example.com" },
			want: map[string]int{"example.com/gpu": 1}},
		{name: "unhealthy GPU marks its replicas", inv: func() gpu.Inventory {
			inv := synthInventory(2, 0)
			inv.GPUs[1].Health, inv.GPUs[1].HealthReason = gpu.Unhealthy, "xid 48"
			return inv
		}(), cfg: func(c *Config) { c.Sharing = timeslice.Config{Default: &timeslice.Sharing{Replicas: 2}} },
			want: map[string]int{"nvidia.com/gpu.shared": 4}, unhealthy: map[string]int{"nvidia.com/gpu.shared": 2}},
		{name: "an error on one MIG slice marks only that slice", inv: func() gpu.Inventory {
			inv := synthInventory(1, 3)
			inv.GPUs[0].MIGDevices[1].Health, inv.GPUs[0].MIGDevices[1].HealthReason = gpu.Unhealthy, "xid 48 on GPU instance 2"
			return inv
		}(), cfg: func(c *Config) { c.MIGStrategy = MIGMixed },
			want: map[string]int{"nvidia.com/mig-1g.10gb": 3}, unhealthy: map[string]int{"nvidia.com/mig-1g.10gb": 1}},
		{name: "GPU with a pending MIG mode change is withdrawn", inv: func() gpu.Inventory {
			inv := synthInventory(3, 0)
			inv.GPUs[1].MIGPending = true
			return inv
		}(), cfg: func(c *Config) { c.MIGStrategy = MIGMixed },
			want: map[string]int{"nvidia.com/gpu": 2}, wantWarn: "GPU-0001 withdrawn"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			res := build(tc.inv, cfg)
			got := map[string]int{}
			gotBad := map[string]int{}
			for r, s := range res.sets {
				got[r] = len(s.devices)
				for _, d := range s.list() {
					if d.Health != pluginapi.Healthy {
						gotBad[r]++
					}
				}
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("resources = %v, want %v", got, tc.want)
			}
			if tc.unhealthy == nil {
				tc.unhealthy = map[string]int{}
			}
			if !maps.Equal(gotBad, tc.unhealthy) {
				t.Errorf("unhealthy = %v, want %v", gotBad, tc.unhealthy)
			}
			joined := strings.Join(res.warnings, "\n")
			if (tc.wantWarn == "") != (joined == "") || !strings.Contains(joined, tc.wantWarn) {
				t.Errorf("warnings = %q, want %q", joined, tc.wantWarn)
			}
		})
	}
}

func TestListCarriesNUMA(t *testing.T) {
	res := build(synthInventory(4, 0), testConfig())
	var numa []int64
	for _, d := range res.sets["nvidia.com/gpu"].list() {
		numa = append(numa, d.Topology.Nodes[0].ID)
	}
	if want := []int64{0, 0, 1, 1}; !slices.Equal(numa, want) {
		t.Fatalf("NUMA nodes = %v, want %v", numa, want)
	}
}

func TestMIGCapMinor(t *testing.T) {
	// Values from the driver's /proc/driver/nvidia-caps/mig-minors.
	tests := []struct {
		name                     string
		gpuMinor, gi, ci         int
		wantGIMinor, wantCIMinor int
	}{
		{name: "gpu0 gi0 ci0", wantGIMinor: 3, wantCIMinor: 4},
		{name: "gpu0 gi1 ci0", gi: 1, wantGIMinor: 12, wantCIMinor: 13},
		{name: "gpu0 gi14 ci7", gi: 14, ci: 7, wantGIMinor: 129, wantCIMinor: 137},
		{name: "gpu1 gi0 ci0", gpuMinor: 1, wantGIMinor: 138, wantCIMinor: 139},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gi, ci := migCapMinor(tc.gpuMinor, tc.gi, tc.ci)
			if gi != tc.wantGIMinor || ci != tc.wantCIMinor {
				t.Fatalf("migCapMinor = %d, %d; want %d, %d", gi, ci, tc.wantGIMinor, tc.wantCIMinor)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "defaults", cfg: Config{PluginDir: "/p", CDIDir: "/c"}},
		{name: "no plugin dir", cfg: Config{CDIDir: "/c"}, wantErr: "--device-plugin-dir"},
		{name: "relative dir", cfg: Config{PluginDir: "p", CDIDir: "/c"}, wantErr: "must be absolute"},
		{name: "bad strategy", cfg: Config{PluginDir: "/p", CDIDir: "/c", MIGStrategy: "both"}, wantErr: "MIG strategy"},
		{name: "cdi without dir", cfg: Config{PluginDir: "/p", DeviceListStrategy: ListCDI}, wantErr: "needs a CDI dir"},
		{name: "envvar without cdi dir", cfg: Config{PluginDir: "/p", DeviceListStrategy: ListEnvvar}},
		{name: "bad prefix", cfg: Config{PluginDir: "/p", CDIDir: "/c", ResourcePrefix: "nvidia"}, wantErr: "resource prefix"},
		{name: "bad sharing", cfg: Config{PluginDir: "/p", CDIDir: "/c", Sharing: timeslice.Config{Default: &timeslice.Sharing{Replicas: 1}}}, wantErr: "sharing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
