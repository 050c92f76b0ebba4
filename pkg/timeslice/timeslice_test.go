package timeslice

import (
	"errors"
	"testing"
)

func TestReplicaIDRoundTrip(t *testing.T) {
	id := ReplicaID("GPU-1234", 7)
	if id != "GPU-1234::7" {
		t.Fatalf("ReplicaID = %q", id)
	}
	uuid, n, ok := ParseReplicaID(id)
	if !ok || uuid != "GPU-1234" || n != 7 {
		t.Fatalf("ParseReplicaID(%q) = %q, %d, %v", id, uuid, n, ok)
	}
	for _, plain := range []string{"GPU-1234", "MIG-ab", "GPU-1::x", "GPU-1::-1"} {
		if _, _, ok := ParseReplicaID(plain); ok {
			t.Errorf("ParseReplicaID(%q) ok, want a plain ID", plain)
		}
	}
}

func TestSharingValidate(t *testing.T) {
	tests := []struct {
		name    string
		s       Sharing
		memMiB  uint64
		wantErr bool
	}{
		{name: "replicas", s: Sharing{Replicas: 4}},
		{name: "one replica", s: Sharing{Replicas: 1}, wantErr: true},
		{name: "too many", s: Sharing{Replicas: MaxReplicas + 1}, wantErr: true},
		{name: "both forms", s: Sharing{Replicas: 2, Shares: []Share{{MemoryMiB: 1}}}, wantErr: true},
		{name: "unequal shares fit", s: Sharing{Shares: []Share{{MemoryMiB: 40960, ComputePercent: 50}, {MemoryMiB: 20480, ComputePercent: 25}}}, memMiB: 81920},
		{name: "memory over", s: Sharing{Shares: []Share{{MemoryMiB: 60000}, {MemoryMiB: 30000}}}, memMiB: 81920, wantErr: true},
		{name: "compute over", s: Sharing{Shares: []Share{{ComputePercent: 60}, {ComputePercent: 50}}}, wantErr: true},
		{name: "exclusive", s: Sharing{Exclusive: true}},
		{name: "exclusive and replicas", s: Sharing{Exclusive: true, Replicas: 2}, wantErr: true},
		{name: "exclusive and shares", s: Sharing{Exclusive: true, Shares: []Share{{ComputePercent: 50}}}, wantErr: true},
		{name: "exclusive and limitMemory", s: Sharing{Exclusive: true, LimitMemory: true}, wantErr: true},
		{name: "limits above requests fit", s: Sharing{Shares: []Share{{MemoryMiB: 20480, MemoryLimitMiB: 30720}, {MemoryMiB: 61440, MemoryLimitMiB: 81920}}}, memMiB: 81920},
		{name: "limit equal to request", s: Sharing{Shares: []Share{{MemoryMiB: 20480, MemoryLimitMiB: 20480}}}, memMiB: 81920},
		{name: "limit below request", s: Sharing{Shares: []Share{{MemoryMiB: 20480, MemoryLimitMiB: 10240}}}, memMiB: 81920, wantErr: true},
		{name: "limit without request", s: Sharing{Shares: []Share{{MemoryLimitMiB: 10240}}}, wantErr: true},
		{name: "limit above the device", s: Sharing{Shares: []Share{{MemoryMiB: 20480, MemoryLimitMiB: 81921}}}, memMiB: 81920, wantErr: true},
		{name: "limit above any GPU", s: Sharing{Shares: []Share{{MemoryMiB: 20480, MemoryLimitMiB: MaxMemoryMiB + 1}}}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate(tc.memMiB)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Validate() = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}

func TestShareOfAndMPSEnv(t *testing.T) {
	s := Sharing{Replicas: 4, LimitMemory: true}
	sh, err := s.ShareOf(3, 81920)
	if err != nil {
		t.Fatal(err)
	}
	if sh.ComputePercent != 25 || sh.MemoryMiB != 20480 {
		t.Fatalf("ShareOf = %+v, want 25%% and 20480 MiB", sh)
	}
	env := sh.MPSEnv(0)
	if env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "25" || env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=20480M" {
		t.Fatalf("MPSEnv = %v", env)
	}
	if _, err := s.ShareOf(4, 81920); err == nil {
		t.Fatal("ShareOf(4) of 4 replicas succeeded")
	}
	// MPS's pinned limit is hard: a share that may borrow gets its limit.
	borrow := Share{MemoryMiB: 20480, MemoryLimitMiB: 30720}
	if got := borrow.MPSEnv(1)[EnvMPSPinnedDeviceMemLimit]; got != "1=30720M" || borrow.LimitMiB() != 30720 {
		t.Fatalf("borrowing share: MPS limit %q, LimitMiB %d; want 1=30720M, 30720", got, borrow.LimitMiB())
	}
	if l := (Share{MemoryMiB: 20480}).LimitMiB(); l != 20480 {
		t.Fatalf("LimitMiB without a limit = %d, want the request", l)
	}
}

func TestConfigFor(t *testing.T) {
	c := Config{Default: &Sharing{Replicas: 2}, Devices: map[string]Sharing{"GPU-a": {Replicas: 8}, "1": {Replicas: 3}}}
	if s, ok := c.For("GPU-a", 0); !ok || s.Count() != 8 {
		t.Errorf("For(GPU-a) = %v, %v", s, ok)
	}
	if s, ok := c.For("GPU-b", 1); !ok || s.Count() != 3 {
		t.Errorf("For(index 1) = %v, %v", s, ok)
	}
	if s, ok := c.For("GPU-c", 5); !ok || s.Count() != 2 {
		t.Errorf("For(default) = %v, %v", s, ok)
	}
	if _, ok := c.For("MIG-x", 0); ok {
		t.Errorf("default sharing applied to a MIG device")
	}
}

func TestHasMemoryLimits(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		want bool
	}{
		{name: "empty", c: Config{}},
		{name: "plain replicas", c: Config{Default: &Sharing{Replicas: 4}}},
		{name: "limited replicas", c: Config{Devices: map[string]Sharing{"0": {Replicas: 4, LimitMemory: true}}}, want: true},
		{name: "share with memory", c: Config{Devices: map[string]Sharing{"GPU-a": {Shares: []Share{{ComputePercent: 50}, {MemoryMiB: 1024}}}}}, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.HasMemoryLimits(); got != tc.want {
				t.Fatalf("HasMemoryLimits() = %v, want %v", got, tc.want)
			}
		})
	}
}
