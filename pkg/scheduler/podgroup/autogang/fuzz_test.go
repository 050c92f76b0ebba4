package autogang

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzResolve feeds an arbitrary owner object (as JSON, integers as the
// dynamic client decodes them) and pod labels through Resolve and Prune:
// neither may panic; a gang is within bounds or says why not; Prune
// never changes the gang.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{indexedJob, jobSet, lws, pytorch, mpi, ray,
		`{"kind":"Job","metadata":{"name":"j"},"spec":{"parallelism":1e300,"completionMode":"Indexed"}}`,
		`{"kind":"RayCluster","metadata":{"name":"r"},"spec":{"workerGroupSpecs":[{"replicas":9223372036854775807}]}}`,
		`{"kind":"JobSet","metadata":{"name":"j"},"spec":{"replicatedJobs":[null,{"replicas":{}}]}}`,
	} {
		f.Add([]byte(s), "serve", "0", "4")
	}
	f.Fuzz(func(t *testing.T, data []byte, lwsName, groupIndex, size string) {
		if len(data) > 64<<10 {
			return
		}
		var obj map[string]any
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.UseNumber()
		if err := dec.Decode(&obj); err != nil || obj == nil {
			return
		}
		kind := kindOf(obj)
		name := metaString(obj, "name")
		get := func(_ string, r Ref) (map[string]any, bool) {
			if r.Kind == kind && r.Name == name {
				return obj, true
			}
			return nil, r.Kind == KindJobSet
		}
		pod := Pod{Namespace: "ns", Owner: &Ref{APIVersion: "x/v1", Kind: kind, Name: name},
			Labels: map[string]string{LWSGroupIndexLabel: groupIndex}, Annotations: map[string]string{LWSSizeAnnotation: size}}
		if kind == KindLWS {
			pod.Labels[LWSNameLabel] = lwsName
		}
		check := func(g Gang, ok bool) {
			if !ok {
				return
			}
			if g.Invalid == "" && (g.MinMember < 2 || g.MinMember > MaxMinMember) {
				t.Fatalf("gang %+v: MinMember out of bounds", g)
			}
			if g.Invalid != "" && g.MinMember != 0 {
				t.Fatalf("refused gang %+v has a minimum", g)
			}
			if !strings.HasPrefix(g.Key(), "ns/") {
				t.Fatalf("gang key %q outside the pod's namespace", g.Key())
			}
		}
		g1, ok1 := Resolve(pod, get)
		check(g1, ok1)
		Prune(obj)
		g2, ok2 := Resolve(pod, get)
		if ok1 != ok2 || g1.MinMember != g2.MinMember || g1.Key() != g2.Key() {
			t.Fatalf("Prune changed the gang: %+v %v, then %+v %v", g1, ok1, g2, ok2)
		}
	})
}
