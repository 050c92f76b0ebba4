package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/gpud/gpud/pkg/gputel"
)

// fakeUsage is a Usage with fixed learned peaks by pod name, recording
// the samples it hears.
type fakeUsage struct {
	mu      sync.Mutex
	peaks   map[string]uint64
	samples map[string][]uint64
	at      []time.Time
}

func (f *fakeUsage) Run(ctx context.Context) error       { <-ctx.Done(); return nil }
func (f *fakeUsage) Handler() cache.ResourceEventHandler { return cache.ResourceEventHandlerFuncs{} }
func (f *fakeUsage) Record(pod *corev1.Pod, b uint64, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.samples == nil {
		f.samples = map[string][]uint64{}
	}
	f.samples[pod.Name] = append(f.samples[pod.Name], b)
	f.at = append(f.at, at)
}
func (f *fakeUsage) PeakBytes(pod *corev1.Pod) (uint64, bool) {
	b, ok := f.peaks[pod.Name]
	return b, ok
}

// TestTelemetryCountsLearnedPeaks: each cycle's memory attributed to a
// pod's claim is recorded for the usage learner (with the time the node's
// message came); with OvercommitLearned a claim counts at its workload's
// learned peak where that is above the measurement, and the GPU's
// measured use grows by the difference. A claim measured above its
// learned peak, one without a learned peak and one no single pod holds
// count as measured.
func TestTelemetryCountsLearnedPeaks(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name      string
		learned   bool
		wantClaim map[string]uint64
		wantUsed  uint64
	}{
		{name: "learned peaks counted", learned: true,
			wantClaim: map[string]uint64{"claim-a": 10 * gib, "claim-b": 12 * gib, "claim-c": 3 * gib, "claim-shared": 2 * gib}, wantUsed: 27 * gib},
		{name: "measured only without OvercommitLearned",
			wantClaim: map[string]uint64{"claim-a": 4 * gib, "claim-b": 12 * gib, "claim-c": 3 * gib, "claim-shared": 2 * gib}, wantUsed: 21 * gib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &fakeTelemetry{nodes: map[string]*gputel.Node{"n1": {Received: t0, Interval: time.Second, Devices: map[string]gputel.Device{
				"GPU-0": {MemoryUsedBytes: 21 * gib, MemoryTotalBytes: 80 * gib,
					ClaimMemoryBytes: map[string]uint64{"claim-a": 4 * gib, "claim-b": 12 * gib, "claim-c": 3 * gib, "claim-shared": 2 * gib}}}}}}
			u := &fakeUsage{peaks: map[string]uint64{"pod-a": 10 * gib, "pod-b": 10 * gib, "pod-x": 50 * gib, "pod-y": 50 * gib}}
			s, err := New(Config{Client: newTestScheduler(t, placeAll{}).client, Decider: placeAll{}, Telemetry: src, Usage: u, OvercommitLearned: tc.learned})
			if err != nil {
				t.Fatal(err)
			}
			pods := s.factory.Core().V1().Pods().Informer().GetIndexer()
			for _, name := range []string{"pod-a", "pod-b", "pod-c", "pod-x", "pod-y"} {
				if err := pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}}); err != nil {
					t.Fatal(err)
				}
			}
			claims := []*resourceapi.ResourceClaim{allocatedTo("a", "n1", "pod-a"), allocatedTo("b", "n1", "pod-b"), allocatedTo("c", "n1", "pod-c"),
				allocatedTo("shared", "n1", "pod-x", "pod-y")}
			got := s.telemetry(t0, claims)["n1"].Devices["GPU-0"]
			for c, want := range tc.wantClaim {
				if got.ClaimMemoryBytes[c] != want {
					t.Errorf("claim %s counted at %d GiB, want %d GiB", c, got.ClaimMemoryBytes[c]/gib, want/gib)
				}
			}
			if got.MemoryUsedBytes != tc.wantUsed {
				t.Errorf("GPU used %d GiB, want %d GiB", got.MemoryUsedBytes/gib, tc.wantUsed/gib)
			}
			want := map[string][]uint64{"pod-a": {4 * gib}, "pod-b": {12 * gib}, "pod-c": {3 * gib}}
			if len(u.samples) != len(want) {
				t.Errorf("samples recorded %v, want %v (a claim two pods hold is nobody's)", u.samples, want)
			}
			for p, w := range want {
				if len(u.samples[p]) != 1 || u.samples[p][0] != w[0] {
					t.Errorf("pod %s samples %v, want %v", p, u.samples[p], w)
				}
			}
			for _, at := range u.at {
				if !at.Equal(t0) {
					t.Errorf("sample time %v, want the node's message time %v", at, t0)
				}
			}
		})
	}
}
