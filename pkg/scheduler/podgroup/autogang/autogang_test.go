package autogang

import (
	"encoding/json"
	"strings"
	"testing"
)

// store is a Lookup over objects written as JSON, watched kinds by
// "group/Kind".
type store struct {
	objs    map[string]map[string]any // "group/Kind/ns/name"
	watched map[string]bool
}

func newStore(t testing.TB, docs ...string) *store {
	t.Helper()
	s := &store{objs: map[string]map[string]any{}, watched: map[string]bool{
		"batch/Job": true, "jobset.x-k8s.io/JobSet": true, "leaderworkerset.x-k8s.io/LeaderWorkerSet": true,
		"kubeflow.org/PyTorchJob": true, "kubeflow.org/MPIJob": true, "ray.io/RayCluster": true}}
	for _, d := range docs {
		var obj map[string]any
		dec := json.NewDecoder(strings.NewReader(d))
		dec.UseNumber()
		if err := dec.Decode(&obj); err != nil {
			t.Fatalf("%v: %s", err, d)
		}
		av, _ := obj["apiVersion"].(string)
		r := Ref{APIVersion: av, Kind: kindOf(obj), Name: metaString(obj, "name")}
		s.objs[r.Group()+"/"+r.Kind+"/"+metaString(obj, "namespace")+"/"+r.Name] = obj
	}
	return s
}

func (s *store) get(ns string, r Ref) (map[string]any, bool) {
	if !s.watched[r.Group()+"/"+r.Kind] {
		return nil, false
	}
	return s.objs[r.Group()+"/"+r.Kind+"/"+ns+"/"+r.Name], true
}

func jobRef(name string) *Ref {
	return &Ref{APIVersion: "batch/v1", Kind: "Job", Name: name, UID: "uid-" + name}
}

const (
	indexedJob = `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"train","namespace":"ml","uid":"uid-train",
		"creationTimestamp":"2026-01-02T03:04:05Z"},
		"spec":{"parallelism":4,"completions":4,"completionMode":"Indexed"}}`
	jobSet = `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"js","namespace":"ml","uid":"uid-js"},
		"spec":{"replicatedJobs":[
		  {"name":"driver","replicas":1,"template":{"spec":{"parallelism":1,"completions":1}}},
		  {"name":"workers","replicas":2,"template":{"spec":{"parallelism":3,"completions":3}}}]}}`
	jobSetJob = `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"js-workers-0","namespace":"ml","uid":"uid-js-workers-0",
		"labels":{"jobset.sigs.k8s.io/replicatedjob-name":"workers"},
		"ownerReferences":[{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","name":"js","uid":"uid-js","controller":true}]},
		"spec":{"parallelism":3,"completions":3,"completionMode":"Indexed"}}`
	lws = `{"apiVersion":"leaderworkerset.x-k8s.io/v1","kind":"LeaderWorkerSet","metadata":{"name":"serve","namespace":"ml"},
		"spec":{"replicas":2,"leaderWorkerTemplate":{"size":4}}}`
	pytorch = `{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob","metadata":{"name":"pt","namespace":"ml","uid":"uid-pt"},
		"spec":{"pytorchReplicaSpecs":{"Master":{"replicas":1},"Worker":{"replicas":3}}}}`
	mpi = `{"apiVersion":"kubeflow.org/v2beta1","kind":"MPIJob","metadata":{"name":"mpi","namespace":"ml","uid":"uid-mpi"},
		"spec":{"mpiReplicaSpecs":{"Launcher":{"replicas":1},"Worker":{"replicas":8}}}}`
	ray = `{"apiVersion":"ray.io/v1","kind":"RayCluster","metadata":{"name":"rc","namespace":"ml","uid":"uid-rc",
		"ownerReferences":[{"apiVersion":"ray.io/v1","kind":"RayJob","name":"rj","uid":"uid-rj","controller":true}]},
		"spec":{"workerGroupSpecs":[{"replicas":4,"minReplicas":2,"numOfHosts":2},{"replicas":3},{"replicas":5,"suspended":true}]}}`
)

func TestResolve(t *testing.T) {
	tests := []struct {
		name    string
		objs    []string
		pod     Pod
		want    string // key, "" for no gang
		min     int32
		invalid string // substring of Invalid
	}{
		{name: "indexed job", objs: []string{indexedJob}, pod: Pod{Owner: jobRef("train")}, want: "ml/job:train", min: 4},
		{name: "indexed job counts what succeeded", objs: []string{strings.Replace(indexedJob, `"spec"`, `"status":{"succeeded":2},"spec"`, 1)},
			pod: Pod{Owner: jobRef("train")}, want: "ml/job:train", min: 2},
		{name: "indexed job of one pod left", objs: []string{strings.Replace(indexedJob, `"spec"`, `"status":{"succeeded":3},"spec"`, 1)},
			pod: Pod{Owner: jobRef("train")}},
		{name: "indexed job parallelism below completions", objs: []string{strings.Replace(indexedJob, `"completions":4`, `"completions":10`, 1)},
			pod: Pod{Owner: jobRef("train")}, want: "ml/job:train", min: 4},
		{name: "nonindexed job is independent", objs: []string{strings.Replace(indexedJob, `"Indexed"`, `"NonIndexed"`, 1)},
			pod: Pod{Owner: jobRef("train")}},
		{name: "nonindexed job asked to be a gang",
			objs: []string{strings.Replace(strings.Replace(indexedJob, `"Indexed"`, `"NonIndexed"`, 1), `"uid":"uid-train"`, `"uid":"uid-train","annotations":{"gpud.io/gang":"true"}`, 1)},
			pod:  Pod{Owner: jobRef("train")}, want: "ml/job:train", min: 4},
		{name: "indexed job opted out", objs: []string{strings.Replace(indexedJob, `"uid":"uid-train"`, `"uid":"uid-train","annotations":{"gpud.io/gang":"false"}`, 1)},
			pod: Pod{Owner: jobRef("train")}},
		{name: "bad gang annotation", objs: []string{strings.Replace(indexedJob, `"uid":"uid-train"`, `"uid":"uid-train","annotations":{"gpud.io/gang":"yes"}`, 1)},
			pod: Pod{Owner: jobRef("train")}, want: "ml/job:train", invalid: `annotation gpud.io/gang "yes"`},
		{name: "elastic minimum", objs: []string{strings.Replace(indexedJob, `"uid":"uid-train"`, `"uid":"uid-train","annotations":{"gpud.io/gang-min-member":"3"}`, 1)},
			pod: Pod{Owner: jobRef("train")}, want: "ml/job:train", min: 3},
		{name: "elastic minimum above size", objs: []string{strings.Replace(indexedJob, `"uid":"uid-train"`, `"uid":"uid-train","annotations":{"gpud.io/gang-min-member":"5"}`, 1)},
			pod: Pod{Owner: jobRef("train")}, want: "ml/job:train", invalid: "above the workload's 4 pods"},
		{name: "negative parallelism", objs: []string{strings.Replace(indexedJob, `"parallelism":4`, `"parallelism":-4`, 1)},
			pod: Pod{Owner: jobRef("train")}, want: "ml/job:train", invalid: "spec.parallelism -4 is outside 0..10000"},
		{name: "huge parallelism", objs: []string{strings.Replace(indexedJob, `"parallelism":4`, `"parallelism":99999999999`, 1)},
			pod: Pod{Owner: jobRef("train")}, want: "ml/job:train", invalid: "spec.parallelism 99999999999 is outside"},
		{name: "fractional parallelism", objs: []string{strings.Replace(indexedJob, `"parallelism":4`, `"parallelism":2.5`, 1)},
			pod: Pod{Owner: jobRef("train")}, want: "ml/job:train", invalid: "not an integer"},
		{name: "string parallelism", objs: []string{strings.Replace(indexedJob, `"parallelism":4`, `"parallelism":"4"`, 1)},
			pod: Pod{Owner: jobRef("train")}, want: "ml/job:train", invalid: "want an integer"},
		{name: "owner not seen yet", pod: Pod{Owner: jobRef("train")}, want: "ml/job:train", invalid: "waiting for its owner Job ml/train"},
		{name: "owner of another uid", objs: []string{indexedJob}, pod: Pod{Owner: &Ref{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "old"}},
			want: "ml/job:train", invalid: "waiting for its owner"},
		{name: "owner kind not watched", pod: Pod{Owner: &Ref{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web"}}},
		{name: "no owner", pod: Pod{}},
		{name: "jobset", objs: []string{jobSet, jobSetJob}, pod: Pod{Owner: jobRef("js-workers-0")}, want: "ml/jobset:js", min: 7},
		{name: "jobset in order", objs: []string{strings.Replace(jobSet, `"spec":{`, `"spec":{"startupPolicy":{"startupPolicyOrder":"InOrder"},`, 1), jobSetJob},
			pod: Pod{Owner: jobRef("js-workers-0")}, want: "ml/jobset:js:workers", min: 6},
		{name: "jobset in order, unknown replicated job", objs: []string{strings.Replace(jobSet, `"spec":{`, `"spec":{"startupPolicy":{"startupPolicyOrder":"InOrder"},`, 1),
			strings.Replace(jobSetJob, `replicatedjob-name":"workers"`, `replicatedjob-name":"nope"`, 1)},
			pod: Pod{Owner: jobRef("js-workers-0")}, want: "ml/jobset:js", invalid: `"nope" names no replicated job`},
		{name: "jobset not seen yet", objs: []string{jobSetJob}, pod: Pod{Owner: jobRef("js-workers-0")}, want: "ml/jobset:js", invalid: "waiting for its owner JobSet"},
		{name: "jobset too big", objs: []string{strings.Replace(jobSet, `"replicas":2`, `"replicas":5000`, 1), jobSetJob},
			pod: Pod{Owner: jobRef("js-workers-0")}, want: "ml/jobset:js", invalid: "more than 10000 pods"},
		{name: "jobset without replicated jobs", objs: []string{`{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"js","namespace":"ml","uid":"uid-js"},"spec":{}}`, jobSetJob},
			pod: Pod{Owner: jobRef("js-workers-0")}, want: "ml/jobset:js", invalid: "spec.replicatedJobs is missing"},
		{name: "lws", objs: []string{lws}, pod: Pod{Labels: map[string]string{LWSNameLabel: "serve", LWSGroupIndexLabel: "1"},
			Annotations: map[string]string{LWSSizeAnnotation: "4"}}, want: "ml/lws:serve:1", min: 4},
		{name: "lws size from the spec", objs: []string{lws}, pod: Pod{Labels: map[string]string{LWSNameLabel: "serve", LWSGroupIndexLabel: "0"}},
			want: "ml/lws:serve:0", min: 4},
		{name: "lws leader ready: leader alone", objs: []string{strings.Replace(lws, `"replicas":2`, `"replicas":2,"startupPolicy":"LeaderReady"`, 1)},
			pod: Pod{Labels: map[string]string{LWSNameLabel: "serve", LWSGroupIndexLabel: "0", LWSWorkerIndexLabel: "0"}}},
		{name: "lws leader ready: workers together", objs: []string{strings.Replace(lws, `"replicas":2`, `"replicas":2,"startupPolicy":"LeaderReady"`, 1)},
			pod: Pod{Labels: map[string]string{LWSNameLabel: "serve", LWSGroupIndexLabel: "0", LWSWorkerIndexLabel: "2"}}, want: "ml/lws:serve:0", min: 3},
		{name: "lws bad size annotation", objs: []string{lws}, pod: Pod{Labels: map[string]string{LWSNameLabel: "serve", LWSGroupIndexLabel: "0"},
			Annotations: map[string]string{LWSSizeAnnotation: "-1"}}, want: "ml/lws:serve:0", invalid: "leaderworkerset.sigs.k8s.io/size"},
		{name: "lws without group index", objs: []string{lws}, pod: Pod{Labels: map[string]string{LWSNameLabel: "serve"}},
			want: "ml/lws:serve:", invalid: "group-index"},
		{name: "lws not seen yet", pod: Pod{Labels: map[string]string{LWSNameLabel: "serve", LWSGroupIndexLabel: "0"}},
			want: "ml/lws:serve:0", invalid: "waiting for its owner LeaderWorkerSet ml/serve"},
		{name: "lws of one pod", objs: []string{strings.Replace(lws, `"size":4`, `"size":1`, 1)},
			pod: Pod{Labels: map[string]string{LWSNameLabel: "serve", LWSGroupIndexLabel: "0"}}},
		{name: "pytorchjob", objs: []string{pytorch}, pod: Pod{Owner: &Ref{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "pt", UID: "uid-pt"}},
			want: "ml/pytorchjob:pt", min: 4},
		{name: "pytorchjob minAvailable", objs: []string{strings.Replace(pytorch, `"spec":{`, `"spec":{"runPolicy":{"schedulingPolicy":{"minAvailable":2}},`, 1)},
			pod: Pod{Owner: &Ref{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "pt"}}, want: "ml/pytorchjob:pt", min: 2},
		{name: "pytorchjob replicas unset count one", objs: []string{strings.Replace(pytorch, `"Master":{"replicas":1}`, `"Master":{}`, 1)},
			pod: Pod{Owner: &Ref{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "pt"}}, want: "ml/pytorchjob:pt", min: 4},
		{name: "mpijob", objs: []string{mpi}, pod: Pod{Owner: &Ref{APIVersion: "kubeflow.org/v2beta1", Kind: "MPIJob", Name: "mpi"}},
			want: "ml/mpijob:mpi", min: 9},
		{name: "raycluster", objs: []string{ray}, pod: Pod{Owner: &Ref{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: "rc", UID: "uid-rc"}},
			want: "ml/raycluster:rc", min: 1 + 2*2 + 3},
		{name: "raycluster negative hosts", objs: []string{strings.Replace(ray, `"numOfHosts":2`, `"numOfHosts":-2`, 1)},
			pod: Pod{Owner: &Ref{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: "rc"}}, want: "ml/raycluster:rc", invalid: "spec.workerGroupSpecs[0].numOfHosts -2"},
		{name: "raycluster head only", objs: []string{`{"apiVersion":"ray.io/v1","kind":"RayCluster","metadata":{"name":"rc","namespace":"ml"},"spec":{}}`},
			pod: Pod{Owner: &Ref{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: "rc"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, tc.objs...)
			tc.pod.Namespace = "ml"
			g, ok := Resolve(tc.pod, s.get)
			if tc.want == "" {
				if ok {
					t.Fatalf("Resolve() = %+v, want no gang", g)
				}
				return
			}
			if !ok {
				t.Fatalf("Resolve() = no gang, want %s", tc.want)
			}
			if g.Key() != tc.want {
				t.Errorf("key %q, want %q", g.Key(), tc.want)
			}
			if tc.invalid != "" {
				if !strings.Contains(g.Invalid, tc.invalid) {
					t.Errorf("Invalid %q, want it to contain %q", g.Invalid, tc.invalid)
				}
				return
			}
			if g.Invalid != "" || g.MinMember != tc.min {
				t.Errorf("MinMember %d Invalid %q, want %d and valid", g.MinMember, g.Invalid, tc.min)
			}
		})
	}
}

func TestResolveCreatedAndKind(t *testing.T) {
	g, ok := Resolve(Pod{Namespace: "ml", Owner: jobRef("train")}, newStore(t, indexedJob).get)
	if !ok || g.Kind != "Job" || g.Created.IsZero() || g.Created.Year() != 2026 {
		t.Fatalf("Resolve() = %+v, %v; want the Job's kind and creationTimestamp", g, ok)
	}
}

// TestResolveTopology: the deciding workload's topology annotations come
// with its gang as written (the scheduler validates them); others' do not.
func TestResolveTopology(t *testing.T) {
	job := strings.Replace(indexedJob, `"uid":"uid-train"`,
		`"uid":"uid-train","annotations":{"gpud.io/gang-topology":"rack","gpud.io/gang-topology-mode":"preferred","other":"x"}`, 1)
	g, ok := Resolve(Pod{Namespace: "ml", Owner: jobRef("train")}, newStore(t, job).get)
	want := map[string]string{TopologyAnnotation: "rack", TopologyModeAnnotation: "preferred"}
	if !ok || len(g.Topology) != 2 || g.Topology[TopologyAnnotation] != "rack" || g.Topology[TopologyModeAnnotation] != "preferred" || g.Object != "Job ml/train" {
		t.Fatalf("Resolve() = %+v, %v; want Topology %v from Job ml/train", g, ok, want)
	}
	// A JobSet decides: its Job's annotations do not count.
	js := strings.Replace(jobSetJob, `"uid":"uid-js-workers-0",`, `"uid":"uid-js-workers-0","annotations":{"gpud.io/gang-topology":"zone"},`, 1)
	g, ok = Resolve(Pod{Namespace: "ml", Owner: jobRef("js-workers-0")}, newStore(t, jobSet, js).get)
	if !ok || g.Topology != nil || g.Object != "JobSet ml/js" {
		t.Fatalf("Resolve() = %+v, %v; want no topology from JobSet ml/js", g, ok)
	}
}

func TestPrune(t *testing.T) {
	var obj map[string]any
	doc := `{"kind":"JobSet","metadata":{"name":"a","managedFields":[{"x":1}]},"status":{"succeeded":1,"big":"x"},
		"spec":{"replicatedJobs":[{"name":"w","template":{"spec":{"parallelism":2,"template":{"spec":{"containers":[{"name":"c"}]}}}}}]}}`
	if err := json.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	Prune(obj)
	got, _ := json.Marshal(obj)
	want := `{"kind":"JobSet","metadata":{"name":"a"},"spec":{"replicatedJobs":[{"name":"w","template":{"spec":{"parallelism":2}}}]},"status":{"succeeded":1}}`
	if string(got) != want {
		t.Fatalf("Prune() = %s\nwant %s", got, want)
	}
}
