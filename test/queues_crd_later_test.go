package test

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/kubectlgpud"
	"github.com/gpud/gpud/pkg/scheduler"
	"github.com/gpud/gpud/pkg/scheduler/decide"
	"github.com/gpud/gpud/pkg/scheduler/queues"
	"github.com/gpud/gpud/test/k8senv"
)

// The Queue CRD installed after the scheduler started is picked up
// without a restart: on a real kube-apiserver (no kube-scheduler),
// pkg/scheduler runs in-process as the gpud-scheduler service account
// with a queues.Source that asks discovery again (as cmd/gpud wires it);
// a pod runs with no queue, then the CRD and a Queue binding its
// namespace with a CPU limit are applied, the Queue's status counts the
// running pod, and the namespace's next pod waits on the queue's limit;
// kubectl gpud queues then shows the Queue with that status.
func TestQueueCRDInstalledAfterStart(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver")
	}
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	applyRBAC(t, env, "../deploy/scheduler/rbac.yaml")
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	schedCfg := env.ServiceAccountConfig(t, "gpud", "gpud-scheduler")
	schedClient, err := kubernetes.NewForConfig(schedCfg)
	if err != nil {
		t.Fatal(err)
	}
	schedDyn, err := dynamic.NewForConfig(schedCfg)
	if err != nil {
		t.Fatal(err)
	}
	src, err := queues.NewSource(queues.Config{Dynamic: schedDyn, Client: schedClient, Discovery: schedClient.Discovery(),
		RecheckInterval: 200 * time.Millisecond, StatusInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if src.Served() {
		t.Fatal("Source.Served() before the CRD is installed")
	}
	s, err := scheduler.New(scheduler.Config{Client: schedClient, Decider: decide.New(decide.Config{}), Resync: 500 * time.Millisecond,
		QueueSet: src.Set, QueueStatus: src.Observe, GroupsSynced: src.Synced})
	if err != nil {
		t.Fatal(err)
	}
	src.OnChange(s.Wake)
	testwait.Run(t, "queues", src.Run)
	testwait.Run(t, "scheduler", s.Run)
	env.CreateNode(t, "cpu-node", nil)

	// Without the CRD the scheduler runs, each pod in no queue.
	createQueuePod(t, env, "team-a", "a-0", "600m", "")
	env.WaitForPodBound(t, "team-a", "a-0", queueTimeout)

	// The CRD and a Queue binding team-a, applied to the running scheduler.
	installQueueCRD(t, env, dyn)
	q := yamlDocs(t, `
apiVersion: scheduling.gpud.io/v1alpha1
kind: Queue
metadata: {name: team-a}
spec:
  limit: {cpuMilli: 1000}
  namespaces: [team-a]
`)[0]
	if _, err := dyn.Resource(queues.GVR).Create(ctx, q, strict); err != nil {
		t.Fatalf("create Queue team-a: %v", err)
	}
	testwait.For(t, queueTimeout, "the Source to see the CRD", src.Served)
	waitQueueStatus(t, dyn, "team-a", func(st queues.Status) error {
		if st.Usage.CPUMilli != 600 {
			return fmt.Errorf("usage %d milli-CPU, want 600 (a-0)", st.Usage.CPUMilli)
		}
		return wantCondition(st, queues.ConditionAccepted, metav1.ConditionTrue, "")
	})
	// team-a's limit (1000m) holds a-0's 600m: a-1 (600m) waits on it.
	createQueuePod(t, env, "team-a", "a-1", "600m", "")
	if msg := waitPodScheduledFalse(t, env, "team-a", "a-1"); !strings.Contains(msg, "team-a") {
		t.Fatalf("a-1's PodScheduled message %q, want the queue team-a's limit", msg)
	}
	waitQueueStatus(t, dyn, "team-a", func(st queues.Status) error {
		if st.PendingPods != 1 {
			return fmt.Errorf("%d pending, want 1 (a-1)", st.PendingPods)
		}
		return nil
	})

	// kubectl gpud queues reads the Queue and its status from the API
	// server: its limit, bound namespace, usage and pending pod.
	var out bytes.Buffer
	if err := kubectlgpud.RunClients(ctx, kubectlgpud.Clients{Kube: env.Client, Dynamic: dyn}, kubectlgpud.Options{Command: "queues"}, &out); err != nil {
		t.Fatalf("kubectl gpud queues: %v", err)
	}
	row := regexp.MustCompile(`(?m)^team-a +1 +team-a +- +cpuMilli=1000 +cpuMilli=600 +1 +accepted, borrowing *$`)
	if !row.MatchString(out.String()) {
		t.Fatalf("kubectl gpud queues printed\n%s\nwant a row for Queue team-a: weight 1, namespace team-a, limit cpuMilli=1000, used cpuMilli=600, 1 pending, accepted and borrowing (no guarantee)", out.String())
	}
}
