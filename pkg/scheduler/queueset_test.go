package scheduler

import (
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// A Config.QueueSet's tree is the cycle's, its queue is each pod's, and a
// pod it refuses waits with its reason instead of being decided.
func TestSnapshotQueueSet(t *testing.T) {
	ts := newTestScheduler(t, placeAll{})
	tree := []jobs.Queue{{Name: "a"}, {Name: "b"}}
	ts.snap.queueSet = func() ([]jobs.Queue, []jobs.Reservation, func(*corev1.Pod) (string, error)) {
		return tree, nil, func(p *corev1.Pod) (string, error) {
			if p.Name == "escapes" {
				return "", errors.New("namespace default is bound to queue a")
			}
			return "a", nil
		}
	}
	ok, refused := cpuPod("ok", t0, "1"), cpuPod("escapes", t0, "1")
	refused.Labels = map[string]string{"gpud.io/queue": "b"}
	sn := ts.snapshotOf(inputs{pods: []*corev1.Pod{ok, refused}, nodes: []*corev1.Node{rulesNode("n")}, slices: nodeSlices(t, "dgx-h100", "n")})
	if got := pendingNames(sn); !slices.Equal(got, []string{"ok"}) || sn.Pending[0].Queue != "a" {
		t.Fatalf("pending %v, want [ok] in queue a", got)
	}
	if len(sn.Queues) != 2 {
		t.Fatalf("snapshot queues %v, want the QueueSet's", sn.Queues)
	}
	if len(sn.missing) != 1 || sn.missing[0].Pod.Pod.Name != "escapes" || sn.missing[0].Code != CodeQueueRefused ||
		sn.missing[0].Message != "namespace default is bound to queue a" {
		t.Fatalf("refused pods %+v, want escapes with code %s and the QueueSet's reason", sn.missing, CodeQueueRefused)
	}
}
