package autogang

import "testing"

// BenchmarkResolve is one pod's grouping as each cycle does it for every
// pod: a JobSet worker (two lookups and the JobSet's replicated jobs), an
// Indexed Job's pod, and a pod whose owner is not a workload.
func BenchmarkResolve(b *testing.B) {
	s := newStore(b, jobSet, jobSetJob, indexedJob)
	for _, bc := range []struct {
		name string
		pod  Pod
	}{
		{"jobset", Pod{Namespace: "ml", Owner: jobRef("js-workers-0")}},
		{"job", Pod{Namespace: "ml", Owner: jobRef("train")}},
		{"replicaset", Pod{Namespace: "ml", Owner: &Ref{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := Resolve(bc.pod, s.get); !ok && bc.name != "replicaset" {
					b.Fatal("no gang")
				}
			}
		})
	}
}
