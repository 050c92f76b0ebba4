package queues

import (
	"encoding/json"
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// FuzzConvert feeds arbitrary Queue JSON through FromUnstructured and
// Convert: either an ErrInvalid error, or a queue within bounds that the
// allocator's tree accepts, and Resolve never panics or builds a tree the
// allocator refuses.
func FuzzConvert(f *testing.F) {
	f.Add(`{"metadata":{"name":"a"},"spec":{"limit":{"gpuMilli":8000},"guaranteed":{"gpuMilli":1000},"weight":2}}`)
	f.Add(`{"metadata":{"name":"a"},"spec":{"parent":"a"}}`)
	f.Add(`{"metadata":{"name":"a"},"spec":{"weight":"2.5"}}`)
	f.Add(`{"metadata":{"name":"a"},"spec":{"weight":"1000000.999"}}`)
	f.Add(`{"metadata":{"name":"a"},"spec":{"modelLimit":{"A100":-1},"namespaces":["x","x"]}}`)
	f.Add(`{"metadata":{"name":"a"},"spec":{"reservations":[{"name":"r","nodes":["n"],"start":"2026-01-01T00:00:00Z","end":"2025-01-01T00:00:00Z"}]}}`)
	f.Fuzz(func(t *testing.T, data string) {
		var obj map[string]any
		if json.Unmarshal([]byte(data), &obj) != nil {
			return
		}
		q, err := FromUnstructured(&unstructured.Unstructured{Object: obj})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("FromUnstructured error %v is not ErrInvalid", err)
			}
			return
		}
		jq, rs, err := Convert(q)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Convert error %v is not ErrInvalid", err)
			}
		} else {
			for _, r := range []jobs.Resources{jq.Quota.Guaranteed, jq.Quota.Limit} {
				for _, v := range []int64{r.CPUMilli, r.MemoryMiB, r.GPUMilli, r.GPUMemoryMiB, r.MIGSlices} {
					if v < 0 || v > MaxResource {
						t.Fatalf("accepted resource %d outside 0..%d", v, MaxResource)
					}
				}
			}
			if !(jq.Weight >= 0 && jq.Weight <= MaxWeight) {
				t.Fatalf("accepted weight %v outside 0..%d", jq.Weight, MaxWeight)
			}
			for _, r := range rs {
				if r.End <= r.Start || len(r.Nodes) == 0 {
					t.Fatalf("accepted reservation %+v", r)
				}
			}
			jq.Parent = ""
			if _, err := jobs.NewQueueTree([]jobs.Queue{jq}, nil); err != nil {
				t.Fatalf("accepted queue %+v: the allocator refuses it: %v", jq, err)
			}
		}
		other := queue("other", q.Name)
		s := Resolve([]*Queue{q, other}, []jobs.Queue{{Name: "file"}}, nil)
		if _, err := jobs.NewQueueTree(s.Queues, nil); err != nil {
			t.Fatalf("Resolve built a tree the allocator refuses: %v", err)
		}
		_, _ = s.QueueOf(nsPod("ns", q.Name), q.Name)
	})
}
