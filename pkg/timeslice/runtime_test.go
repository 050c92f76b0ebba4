package timeslice

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/usage"
)

func testInventory() gpu.Inventory {
	return gpu.Inventory{GPUs: []gpu.GPU{
		{Index: 0, UUID: "GPU-a", MemoryBytes: 80 << 30},
		{Index: 1, UUID: "GPU-b", MemoryBytes: 80 << 30, MIGEnabled: true, MIGDevices: []gpu.MIGDevice{{UUID: "MIG-b1", MemoryBytes: 20 << 30}}},
	}}
}

func TestCheckChange(t *testing.T) {
	four := Config{Devices: map[string]Sharing{"GPU-a": {Replicas: 4}}}
	fractions := Config{Devices: map[string]Sharing{"MIG-b1": {Shares: []Share{{MemoryMiB: 5120, ComputePercent: 25}, {MemoryMiB: 15360, ComputePercent: 75}}}}}
	tests := []struct {
		name      string
		old, next Config
		allocated map[string]string
		wantErr   error
		errHas    []string
	}{
		{name: "more replicas", old: four, next: Config{Devices: map[string]Sharing{"GPU-a": {Replicas: 8}}}, allocated: map[string]string{"GPU-a::3": "ns/p"}},
		{name: "fewer replicas, none taken away", old: four, next: Config{Devices: map[string]Sharing{"GPU-a": {Replicas: 2}}}, allocated: map[string]string{"GPU-a::1": "ns/p"}},
		{name: "fewer replicas take one away", old: four, next: Config{Devices: map[string]Sharing{"GPU-a": {Replicas: 2}}},
			allocated: map[string]string{"GPU-a::3": "ml/train-1"}, wantErr: ErrRefused, errHas: []string{"GPU-a::3", "ml/train-1", "2 shares"}},
		{name: "more memory-limited replicas shrink an allocated one", old: Config{Devices: map[string]Sharing{"GPU-a": {Replicas: 4, LimitMemory: true}}},
			next:      Config{Devices: map[string]Sharing{"GPU-a": {Replicas: 8, LimitMemory: true}}},
			allocated: map[string]string{"GPU-a::0": "ml/a"}, wantErr: ErrRefused, errHas: []string{"20480 MiB", "10240 MiB"}},
		{name: "unsharing an allocated GPU", old: four, next: Config{}, allocated: map[string]string{"GPU-a::0": "ml/a"},
			wantErr: ErrRefused, errHas: []string{"stops sharing GPU-a", "ml/a"}},
		{name: "index key resolves to the same GPU", old: four, next: Config{Devices: map[string]Sharing{"0": {Replicas: 4}}}, allocated: map[string]string{"GPU-a::3": "ns/p"}},
		{name: "limits of an allocated share change", old: fractions,
			next:      Config{Devices: map[string]Sharing{"MIG-b1": {Shares: []Share{{MemoryMiB: 4096, ComputePercent: 25}, {MemoryMiB: 15360, ComputePercent: 75}}}}},
			allocated: map[string]string{"MIG-b1::0": "ml/small"}, wantErr: ErrRefused, errHas: []string{"MIG-b1::0", "5120 MiB, 25% compute -> 4096 MiB, 25% compute"}},
		{name: "limit of an allocated share shrinks", old: Config{Devices: map[string]Sharing{"MIG-b1": {Shares: []Share{{MemoryMiB: 5120, MemoryLimitMiB: 10240}}}}},
			next:      Config{Devices: map[string]Sharing{"MIG-b1": {Shares: []Share{{MemoryMiB: 5120, MemoryLimitMiB: 8192}}}}},
			allocated: map[string]string{"MIG-b1::0": "ml/small"}, wantErr: ErrRefused, errHas: []string{"5120 MiB (limit 10240 MiB), all compute -> 5120 MiB (limit 8192 MiB)"}},
		{name: "limit of an allocated share grows", old: fractions,
			next:      Config{Devices: map[string]Sharing{"MIG-b1": {Shares: []Share{{MemoryMiB: 5120, MemoryLimitMiB: 10240, ComputePercent: 25}, {MemoryMiB: 15360, ComputePercent: 75}}}}},
			allocated: map[string]string{"MIG-b1::0": "ml/small"}},
		{name: "limits of a free share change", old: fractions,
			next:      Config{Devices: map[string]Sharing{"MIG-b1": {Shares: []Share{{MemoryMiB: 4096, ComputePercent: 25}, {MemoryMiB: 15360, ComputePercent: 75}}}}},
			allocated: map[string]string{"MIG-b1::1": "ml/big"}},
		{name: "invalid next config", old: four, next: Config{Devices: map[string]Sharing{"MIG-b1": {Shares: []Share{{MemoryMiB: 30000}}}}},
			wantErr: ErrInvalid, errHas: []string{"MIG-b1", "30000 MiB"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckChange(tc.old, tc.next, testInventory(), tc.allocated)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("CheckChange = %v, want %v", err, tc.wantErr)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestStoreUpdate(t *testing.T) {
	s := NewStore(Config{Devices: map[string]Sharing{"GPU-a": {Replicas: 4}}})
	ch := s.Changed()
	if _, err := s.Update(Config{}, testInventory(), map[string]string{"GPU-a::2": "ns/p"}); !errors.Is(err, ErrRefused) {
		t.Fatalf("Update = %v, want ErrRefused", err)
	}
	select {
	case <-ch:
		t.Fatal("a refused update notified watchers")
	default:
	}
	if s.Get().Devices["GPU-a"].Replicas != 4 {
		t.Fatalf("refused update changed the config to %+v", s.Get())
	}
	next := Config{Devices: map[string]Sharing{"GPU-a": {Replicas: 8}}}
	changed, err := s.Update(next, testInventory(), map[string]string{"GPU-a::2": "ns/p"})
	if err != nil || !changed {
		t.Fatalf("Update = %v, %v; want changed", changed, err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("watchers not told about the change")
	}
	if changed, _ := s.Update(next, testInventory(), nil); changed {
		t.Error("the same config reported as a change")
	}
}

type fakeAllocations struct {
	as  []usage.Assignment
	err error
}

func (f fakeAllocations) Allocations(context.Context) ([]usage.Assignment, error) { return f.as, f.err }

// TestRuntimeUpdate checks the sharing-update policy: every change is
// checked against this node's devices (a 400-class ErrInvalid naming the
// key) and the kubelet's allocations (ErrRefused), and a kubelet that does
// not answer refuses the change rather than guess.
func TestRuntimeUpdate(t *testing.T) {
	inv := testInventory
	tests := []struct {
		name    string
		allocs  AllocationLister
		next    Config
		wantErr error
		errHas  string
		changed bool
	}{
		{name: "valid", next: Config{Devices: map[string]Sharing{"GPU-a": {Replicas: 4}}}, changed: true},
		{name: "unknown index", next: Config{Devices: map[string]Sharing{"99": {Replicas: 2}}}, wantErr: ErrInvalid, errHas: `"99"`},
		{name: "unknown uuid", next: Config{Devices: map[string]Sharing{"GPU-zz": {Replicas: 2}}}, wantErr: ErrInvalid, errHas: "GPU-zz"},
		{name: "shares over the device", next: Config{Devices: map[string]Sharing{"MIG-b1": {Shares: []Share{{MemoryMiB: 20480}, {MemoryMiB: 1}}}}}, wantErr: ErrInvalid, errHas: "MIG-b1"},
		{name: "kubelet does not answer", allocs: fakeAllocations{err: errors.New("deadline exceeded")},
			next: Config{Devices: map[string]Sharing{"GPU-a": {Replicas: 4}}}, wantErr: ErrRefused, errHas: "try again"},
		{name: "no kubelet", allocs: fakeAllocations{}, next: Config{Devices: map[string]Sharing{"GPU-a": {Replicas: 2}}}, changed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRuntime(RuntimeConfig{Inventory: inv, Allocations: tc.allocs})
			changed := r.SharingChanged()
			got, err := r.Update(t.Context(), tc.next)
			if !errors.Is(err, tc.wantErr) || (err != nil && !strings.Contains(err.Error(), tc.errHas)) {
				t.Fatalf("Update = %v, want %v containing %q", err, tc.wantErr, tc.errHas)
			}
			if got != tc.changed {
				t.Fatalf("Update changed = %v, want %v", got, tc.changed)
			}
			select {
			case <-changed:
				if !tc.changed {
					t.Fatal("watchers woken without a change")
				}
			default:
				if tc.changed {
					t.Fatal("watchers not woken by a change")
				}
			}
		})
	}
}
