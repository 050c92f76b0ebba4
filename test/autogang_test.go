package test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/test/k8senv"
)

// Gangs without PodGroups, end to end: a real kube-apiserver serving
// copies of the JobSet and LeaderWorkerSet CRDs (test/testdata), the
// workload objects and their pods created as the operators' controllers
// create them (owner references, labels, annotations; no controller runs
// here), and `gpud scheduler` with the shipped RBAC. Each gang gets less
// room than it needs (nothing may bind: no partial gang), then the room
// (all bind). A NonIndexed Job's pods are independent: with the same
// short room, as many as fit bind.

var (
	jobSetGVR = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}
	lwsGVR    = schema.GroupVersionResource{Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"}
)

// agNodeCPUs is each of the two nodes' CPUs; every gang pod asks one.
const agNodeCPUs = 4

func TestAutoGangsEndToEnd(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver and gpud scheduler")
	}
	bin := buildGpud(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"jobset-crd.yaml", "leaderworkerset-crd.yaml"} {
		installCRD(t, env, dyn, filepath.Join("testdata", f))
	}
	for _, n := range []string{"ag-a", "ag-b"} {
		env.CreateNode(t, n, nil, func(n *corev1.Node) {
			for _, l := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
				l[corev1.ResourceCPU] = resource.MustParse(fmt.Sprint(agNodeCPUs))
			}
		})
	}
	if _, err := env.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := schedulerIdentity(t, env) // the shipped RBAC: reading jobs, jobsets, leaderworkersets
	sched := startSchedulerProc(t, bin, filepath.Join(shortDir(t), "sched"), kubeconfig)
	waitForLeader(t, []*schedProc{sched}, nil)
	log, _ := os.ReadFile(sched.logPath)
	for _, want := range []string{"jobs.batch/v1", "jobsets.jobset.x-k8s.io/v1alpha2", "leaderworkersets.leaderworkerset.x-k8s.io/v1"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("scheduler's start line does not name %s among the workload APIs it reads", want)
		}
	}

	t.Run("JobSet", func(t *testing.T) {
		js := createJobSet(t, dyn, "train", 2, 3) // 2 Jobs × 3 pods
		checkGang(t, env, "ml/jobset:train", 6, func() (pods []string) {
			for j := range 2 {
				job := createAGJob(t, env, fmt.Sprintf("train-workers-%d", j), 3, batchv1.IndexedCompletion,
					map[string]string{"jobset.sigs.k8s.io/jobset-name": "train", "jobset.sigs.k8s.io/replicatedjob-name": "workers"},
					&metav1.OwnerReference{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "train", UID: js, Controller: ptr.To(true)})
				for i := range 3 {
					pods = append(pods, createAGPod(t, env, fmt.Sprintf("train-workers-%d-%d", j, i), job,
						map[string]string{"jobset.sigs.k8s.io/jobset-name": "train", "jobset.sigs.k8s.io/replicatedjob-name": "workers"}, nil))
				}
			}
			return pods
		})
	})

	t.Run("LeaderWorkerSet", func(t *testing.T) {
		createLWS(t, dyn, "serve", 1, 5)
		checkGang(t, env, "ml/lws:serve:0", 5, func() (pods []string) {
			for w := range 5 {
				name := "serve-0"
				if w > 0 {
					name = fmt.Sprintf("serve-0-%d", w)
				}
				// The labels and annotation LWS's pod webhook sets on the
				// leader (worker-index 0) and on the workers.
				pods = append(pods, createAGPod(t, env, name, nil,
					map[string]string{"leaderworkerset.sigs.k8s.io/name": "serve", "leaderworkerset.sigs.k8s.io/group-index": "0",
						"leaderworkerset.sigs.k8s.io/worker-index": fmt.Sprint(w)},
					map[string]string{"leaderworkerset.sigs.k8s.io/size": "5"}))
			}
			return pods
		})
	})

	t.Run("Indexed Job", func(t *testing.T) {
		job := createAGJob(t, env, "sweep", 4, batchv1.IndexedCompletion, nil, nil)
		checkGang(t, env, "ml/job:sweep", 4, func() (pods []string) {
			for i := range 4 {
				pods = append(pods, createAGPod(t, env, fmt.Sprintf("sweep-%d", i), job, map[string]string{"batch.kubernetes.io/job-name": "sweep"}, nil))
			}
			return pods
		})
	})

	t.Run("elastic Job", func(t *testing.T) {
		// gpud.io/gang-min-member 3 of 5: nothing binds with room for 2,
		// three or more with room for 4, all once room frees.
		job := createAGJob(t, env, "elastic", 5, batchv1.IndexedCompletion, nil, nil, map[string]string{"gpud.io/gang-min-member": "3"})
		block := blockAllBut(t, env, 2)
		var pods []string
		for i := range 5 {
			pods = append(pods, createAGPod(t, env, fmt.Sprintf("elastic-%d", i), job, map[string]string{"batch.kubernetes.io/job-name": "elastic"}, nil))
		}
		testwait.For(t, schedTimeout, "every pod of the elastic gang told it waits", func() bool {
			for _, p := range pods {
				if podMessage(t, env, "ml", p) == "" {
					return false
				}
			}
			return true
		})
		time.Sleep(3 * time.Second)
		if b := boundOf(t, env, pods); len(b) > 0 {
			t.Fatalf("%d pods of an elastic gang of minimum 3 bound with room for 2: %v", len(b), b)
		}
		more := blockAllBut(t, env, 4) // before the first blockers go: the room never passes 4
		block()
		block = more
		testwait.For(t, schedTimeout, "4 of the elastic gang's pods bound with room for 4", func() bool { return len(boundOf(t, env, pods)) == 4 })
		block()
		testwait.For(t, schedTimeout, "the 5th bound once room frees", func() bool { return len(boundOf(t, env, pods)) == 5 })
		deleteAGPods(t, env, pods)
	})

	t.Run("NonIndexed Job is not a gang", func(t *testing.T) {
		job := createAGJob(t, env, "queue", 4, batchv1.NonIndexedCompletion, nil, nil)
		block := blockAllBut(t, env, 3)
		var pods []string
		for i := range 4 {
			pods = append(pods, createAGPod(t, env, fmt.Sprintf("queue-%d", i), job, map[string]string{"batch.kubernetes.io/job-name": "queue"}, nil))
		}
		testwait.For(t, schedTimeout, "3 of the work queue's 4 pods bound", func() bool { return len(boundOf(t, env, pods)) == 3 })
		block()
		testwait.For(t, schedTimeout, "the 4th bound once room frees", func() bool { return len(boundOf(t, env, pods)) == 4 })
		deleteAGPods(t, env, pods)
	})
}

// checkGang gives the gang of n pods (made by create) one CPU less than
// they need (nothing may bind, and each pod is told why), then the room
// (all bind), then deletes them.
func checkGang(t *testing.T, env *k8senv.Env, key string, n int, create func() []string) {
	t.Helper()
	unblock := blockAllBut(t, env, n-1)
	start := time.Now()
	pods := create()
	testwait.For(t, schedTimeout, "every pod of "+key+" told it waits", func() bool {
		if b := boundOf(t, env, pods); len(b) > 0 {
			t.Fatalf("%s: %d of %d pods bound with room for %d: a partial gang (%v)", key, len(b), len(pods), n-1, b)
		}
		for _, p := range pods {
			if podMessage(t, env, "ml", p) == "" {
				return false
			}
		}
		return true
	})
	time.Sleep(3 * time.Second) // cycles run every 2 s (--resync-period) and on every change
	if b := boundOf(t, env, pods); len(b) > 0 {
		t.Fatalf("%s: %d of %d pods bound with room for %d: a partial gang (%v)", key, len(b), len(pods), len(pods)-1, b)
	}
	msg := podMessage(t, env, "ml", pods[0])
	t.Logf("%s waits: %s", key, msg)
	if !strings.Contains(msg, key) {
		t.Errorf("%s: pending reason %q does not name the gang", key, msg)
	}
	unblock()
	freed := time.Now()
	testwait.For(t, schedTimeout, "every pod of "+key+" bound", func() bool { return len(boundOf(t, env, pods)) == len(pods) })
	t.Logf("%s: %d pods bound together %s after room freed (%s after they were created)", key, len(pods),
		time.Since(freed).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	deleteAGPods(t, env, pods)
}

// blockAllBut fills the two nodes with bound pods (nodeName set, as if
// placed earlier) so that free CPUs remain, and returns the func that
// deletes them.
func blockAllBut(t *testing.T, env *k8senv.Env, free int) func() {
	t.Helper()
	used := 2*agNodeCPUs - free
	var names []string
	for i, node := range []string{"ag-a", "ag-b"} {
		n := min(used, agNodeCPUs)
		used -= n
		if n == 0 {
			continue
		}
		name := fmt.Sprintf("block-%d-%d", i, time.Now().UnixNano())
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(fmt.Sprint(n))}}}}}}
		if _, err := env.Client.CoreV1().Pods("ml").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return func() { deleteAGPods(t, env, names) }
}

func boundOf(t *testing.T, env *k8senv.Env, pods []string) []string {
	t.Helper()
	var out []string
	for _, name := range pods {
		p, err := env.Client.CoreV1().Pods("ml").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			out = append(out, name+"@"+p.Spec.NodeName)
		}
	}
	return out
}

// deleteAGPods deletes pods at once (no kubelet runs to finish a graceful
// deletion) and waits until they are gone.
func deleteAGPods(t *testing.T, env *k8senv.Env, pods []string) {
	t.Helper()
	for _, p := range pods {
		if err := env.Client.CoreV1().Pods("ml").Delete(t.Context(), p, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, 30*time.Second, "pods deleted", func() bool {
		list, err := env.Client.CoreV1().Pods("ml").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return !slices.ContainsFunc(list.Items, func(p corev1.Pod) bool { return slices.Contains(pods, p.Name) })
	})
}

func installCRD(t *testing.T, env *k8senv.Env, dyn dynamic.Interface, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs := yamlDocs(t, string(data))
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents, want one CRD", path, len(docs))
	}
	crd, err := dyn.Resource(crdGVR).Create(t.Context(), docs[0], strict)
	if err != nil {
		t.Fatalf("create %s: %v", path, err)
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	testwait.ForErr(t, pgTimeout, "CRD "+crd.GetName()+" served", func() error {
		list, err := env.Client.Discovery().ServerPreferredResources()
		if err != nil && list == nil {
			return err
		}
		for _, l := range list {
			if strings.HasPrefix(l.GroupVersion, group+"/") && slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == plural }) {
				return nil
			}
		}
		return errors.New("not in discovery")
	})
}

func createJobSet(t *testing.T, dyn dynamic.Interface, name string, replicas, parallelism int64) types.UID {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": name, "namespace": "ml"},
		"spec": map[string]any{"replicatedJobs": []any{map[string]any{"name": "workers", "replicas": replicas,
			"template": map[string]any{"spec": map[string]any{"parallelism": parallelism, "completions": parallelism,
				"completionMode": "Indexed", "template": map[string]any{"spec": map[string]any{
					"schedulerName": schedName, "restartPolicy": "Never",
					"containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}}}}}},
	}}
	got, err := dyn.Resource(jobSetGVR).Namespace("ml").Create(t.Context(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("JobSet %s: %v", name, err)
	}
	return got.GetUID()
}

func createLWS(t *testing.T, dyn dynamic.Interface, name string, replicas, size int64) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
		"metadata": map[string]any{"name": name, "namespace": "ml"},
		"spec": map[string]any{"replicas": replicas, "leaderWorkerTemplate": map[string]any{"size": size,
			"workerTemplate": map[string]any{"spec": map[string]any{"schedulerName": schedName,
				"containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}}},
	}}
	if _, err := dyn.Resource(lwsGVR).Namespace("ml").Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("LeaderWorkerSet %s: %v", name, err)
	}
}

// createAGJob creates a Job as JobSet's controller (owner set) or a user
// writes it; no Job controller runs, so it makes no pods itself.
func createAGJob(t *testing.T, env *k8senv.Env, name string, parallelism int32, mode batchv1.CompletionMode, labels map[string]string,
	owner *metav1.OwnerReference, annotations ...map[string]string) *metav1.OwnerReference {
	t.Helper()
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", Labels: labels},
		Spec: batchv1.JobSpec{Parallelism: ptr.To(parallelism), Completions: ptr.To(parallelism), CompletionMode: ptr.To(mode),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{SchedulerName: schedName, RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
	if owner != nil {
		j.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	if len(annotations) > 0 {
		j.Annotations = annotations[0]
	}
	got, err := env.Client.BatchV1().Jobs("ml").Create(t.Context(), j, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("Job %s: %v", name, err)
	}
	return &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: name, UID: got.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

// createAGPod creates a pod of gpud's scheduler asking one CPU, owned by
// owner (nil: none) as its controller would create it.
func createAGPod(t *testing.T, env *k8senv.Env, name string, owner *metav1.OwnerReference, labels, annotations map[string]string) string {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{SchedulerName: schedName, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}}}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	if _, err := env.Client.CoreV1().Pods("ml").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	return name
}
