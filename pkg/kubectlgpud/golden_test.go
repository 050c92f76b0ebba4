package kubectlgpud

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the output")

// TestGolden runs each command on the fixture cluster through a fake
// clientset and compares what it prints with testdata/<name>.golden
// (go test -run TestGolden -update rewrites them).
func TestGolden(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		// namespaceUser: RBAC lets the user list pods, events and claims
		// in their namespace only.
		namespaceUser bool
	}{
		{"nodes", Options{Command: "nodes"}, false},
		{"nodes-json", Options{Command: "nodes", Output: OutputJSON}, false},
		{"pods-all", Options{Command: "pods", AllNamespaces: true}, false},
		{"pods-team-a", Options{Command: "pods", Namespace: "team-a"}, false},
		{"pods-json", Options{Command: "pods", Namespace: "team-b", Output: OutputJSON}, false},
		{"why-big", Options{Command: "why", Args: []string{"big-0"}, Namespace: "team-a"}, false},
		{"why-big-json", Options{Command: "why", Args: []string{"big-0"}, Namespace: "team-a", Output: OutputJSON}, false},
		{"why-mig", Options{Command: "why", Args: []string{"mig-wait"}, Namespace: "team-a"}, false},
		{"why-device-plugin", Options{Command: "why", Args: []string{"dp-wait"}, Namespace: "team-b"}, false},
		{"why-bound", Options{Command: "why", Args: []string{"infer-1"}, Namespace: "team-b"}, false},
		{"queues", Options{Command: "queues"}, false},
		{"pods-namespace-user", Options{Command: "pods", Namespace: "team-a"}, true},
		{"why-namespace-user", Options{Command: "why", Args: []string{"big-0"}, Namespace: "team-a"}, true},
	}
	t.Run("queue-objects", func(t *testing.T) { goldenQueues(t, "queue-objects", Options{Command: "queues"}) })
	t.Run("queue-objects-json", func(t *testing.T) {
		goldenQueues(t, "queue-objects-json", Options{Command: "queues", Output: OutputJSON})
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			cs := fakeClient(t)
			if tc.namespaceUser {
				forbidOutside(cs, "team-a")
			}
			if err := Run(t.Context(), cs, tc.opt, &out); err != nil {
				t.Fatalf("Run(%+v): %v", tc.opt, err)
			}
			golden(t, tc.name, out.Bytes())
		})
	}
}

// goldenQueues runs opt on the fixture cluster with its Queue objects
// (fakeQueueClients) and compares the output with testdata/<name>.golden.
func goldenQueues(t *testing.T, name string, opt Options) {
	var out bytes.Buffer
	if err := RunClients(t.Context(), fakeQueueClients(t), opt, &out); err != nil {
		t.Fatalf("RunClients(%+v): %v", opt, err)
	}
	golden(t, name, out.Bytes())
}

// forbidOutside makes the fake API server refuse, as RBAC would, every
// list but pods, events and resourceclaims in namespace ns.
func forbidOutside(cs interface {
	PrependReactor(verb, resource string, reaction k8stesting.ReactionFunc)
}, ns string) {
	cs.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.GetResource()
		if a.GetNamespace() == ns && (r.Resource == "pods" || r.Resource == "events" || r.Resource == "resourceclaims") {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: r.Group, Resource: r.Resource}, "", errors.New("RBAC"))
	})
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestBadInput checks that a command line the plugin cannot run fails
// with an error that names the problem and what to do.
func TestBadInput(t *testing.T) {
	tests := []struct {
		name    string
		opt     Options
		wantErr error
		want    []string
	}{
		{"unknown command", Options{Command: "gpus"}, ErrUsage, []string{`unknown command "gpus"`, "nodes, pods, why, queues"}},
		{"no command", Options{}, ErrUsage, []string{"no command given"}},
		{"why without pod", Options{Command: "why"}, ErrUsage, []string{"kubectl gpud why POD"}},
		{"why two pods", Options{Command: "why", Args: []string{"a", "b"}}, ErrUsage, []string{"one pod name"}},
		{"why bad name", Options{Command: "why", Args: []string{"Not/A/Pod"}}, ErrUsage, []string{`"Not/A/Pod" is not a pod name`}},
		{"why all namespaces", Options{Command: "why", Args: []string{"big-0"}, AllNamespaces: true}, ErrUsage, []string{"not -A"}},
		{"missing pod", Options{Command: "why", Args: []string{"nope"}, Namespace: "team-a"}, ErrNotFound,
			[]string{`pod "nope" in namespace "team-a": not found`, "kubectl get pods -n team-a"}},
		{"bad output", Options{Command: "nodes", Output: "yaml"}, ErrUsage, []string{`output "yaml"`, "table or json"}},
		{"bad namespace", Options{Command: "pods", Namespace: "Team A"}, ErrUsage, []string{`namespace "Team A"`}},
		{"nodes argument", Options{Command: "nodes", Args: []string{"gpu-a"}}, ErrUsage, []string{"nodes takes no arguments"}},
		{"bad prefix", Options{Command: "nodes", ResourcePrefix: "nvidia"}, ErrUsage, []string{"resource prefix"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Run(t.Context(), fakeClient(t), tc.opt, &out)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Run(%+v) = %v, want %v", tc.opt, err, tc.wantErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if out.Len() > 0 {
				t.Errorf("printed %q on error", out.String())
			}
		})
	}
}
