package kubectlgpud

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestQueuesNamespacesByLabel: a namespace bound to a queue only by its
// gpud.io/queue label is shown under that queue, its unlabelled pods
// count in that queue; when RBAC forbids listing namespaces, a note says
// what that leaves out and the pods count by their own labels.
func TestQueuesNamespacesByLabel(t *testing.T) {
	c := fakeQueueClients(t)
	var out bytes.Buffer
	if err := RunClients(t.Context(), c, Options{Command: "queues"}, &out); err != nil {
		t.Fatal(err)
	}
	s, err := Load(t.Context(), c.Kube, Need{Pods: true, DRA: true, OptionalDRA: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := LoadQueues(t.Context(), c.Dynamic, s); err != nil {
		t.Fatal(err)
	}
	if err := LoadNamespaces(t.Context(), c.Kube, s); err != nil {
		t.Fatal(err)
	}
	var research *QueueObject
	for _, q := range QueueObjects(s) {
		if q.Name == "research" {
			research = &q
		}
	}
	if research == nil || strings.Join(research.LabelledNamespaces, ",") != "team-c" || strings.Join(research.Namespaces, ",") != "team-a" {
		t.Fatalf("research: %+v, want team-a by spec.namespaces and team-c by label", research)
	}
	if !strings.Contains(out.String(), "team-a,team-c(label)") || !strings.Contains(out.String(), "team-d (batch)") {
		t.Errorf("output does not show team-c under research and team-d's label:\n%s", out.String())
	}
	byName := map[string]QueueUse{}
	for _, q := range Queues(s, DefaultResourcePrefix) {
		byName[q.Name] = q
	}
	if byName["research"].Pending != 3 || byName[""].Pending != 0 {
		t.Errorf("queues %+v: want notebook-0 (team-c) pending in research with big-0, big-1 and mig-wait", byName)
	}

	// RBAC forbids listing namespaces.
	cs := c.Kube.(*fake.Clientset)
	cs.PrependReactor("list", "namespaces", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "", errors.New("RBAC"))
	})
	out.Reset()
	if err := RunClients(t.Context(), c, Options{Command: "queues"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "note: cannot list namespaces (Forbidden)") || strings.Contains(out.String(), "(label)") {
		t.Errorf("forbidden namespaces: output\n%s", out.String())
	}
}
