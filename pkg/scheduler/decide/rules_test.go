package decide

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/rules"
)

const hostnameLabel = "kubernetes.io/hostname"

// withRules makes e's snapshots carry kube-scheduler's rules over a fake
// API server without volumes.
func withRules(t *testing.T, e *env) {
	t.Helper()
	client := fake.NewClientset()
	f := informers.NewSharedInformerFactory(client, 0)
	r, err := rules.New(t.Context(), rules.Config{Informers: f, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	f.Start(t.Context().Done())
	f.WaitForCacheSync(t.Context().Done())
	t.Cleanup(f.Shutdown)
	e.rules = r
}

// rulesNode adds a dgx-h100 node with its hostname label and the CPU,
// memory and pods kube-scheduler's NodeResourcesFit reads.
func rulesNode(e *env, name string) {
	e.node(name, "dgx-h100", map[string]string{hostnameLabel: name})
	e.nodes[len(e.nodes)-1].Status.Allocatable[corev1.ResourcePods] = resource.MustParse("110")
}

func antiAffine(app string) podOpt {
	return func(x *plan.Pod) {
		labelled("app", app)(x)
		x.Pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}, TopologyKey: hostnameLabel}}}}
	}
}

func hostPort(port int32) podOpt {
	return func(x *plan.Pod) {
		x.Pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: port, Protocol: corev1.ProtocolTCP}}
	}
}

func spreadBy(app string) podOpt {
	return func(x *plan.Pod) {
		labelled("app", app)(x)
		x.Pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: hostnameLabel,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
	}
}

func retry(x *plan.Pod) { x.Retry = true }

// TestRulesInCycle: pods placed earlier in a cycle count for later pods
// of the same cycle, where gpud's packing alone would stack them.
func TestRulesInCycle(t *testing.T) {
	tests := []struct {
		name string
		pods func(e *env)
		// want maps pod name to node; "" pending.
		want map[string]string
		// count: instead of want, pods per node ("a=2,b=2").
		count string
	}{
		{name: "required anti-affinity splits replicas", pods: func(e *env) {
			e.pod("r1", reqs(gpus(1)), antiAffine("web"))
			e.pod("r2", reqs(gpus(1)), antiAffine("web"))
			e.pod("r3", reqs(gpus(1)), antiAffine("web"))
		}, count: "a=1,b=1,pending=1"},
		{name: "host ports: two fit on two nodes", pods: func(e *env) {
			e.pod("h1", reqs(gpus(1)), hostPort(9999))
			e.pod("h2", reqs(gpus(1)), hostPort(9999))
			e.pod("h3", reqs(gpus(1)), hostPort(9999))
		}, count: "a=1,b=1,pending=1"},
		{name: "spread maxSkew 1", pods: func(e *env) {
			for i := range 4 {
				e.pod(fmt.Sprintf("s%d", i), reqs(gpus(1)), spreadBy("s"))
			}
		}, count: "a=2,b=2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			withRules(t, e)
			rulesNode(e, "a")
			rulesNode(e, "b")
			tc.pods(e)
			p := e.decide(Config{})
			per := map[string]int{}
			for _, n := range bindsOf(p) {
				per[n]++
			}
			per["pending"] = len(p.Pending)
			var got []string
			for _, k := range []string{"a", "b", "pending"} {
				if per[k] > 0 {
					got = append(got, fmt.Sprintf("%s=%d", k, per[k]))
				}
			}
			if g := strings.Join(got, ","); g != tc.count {
				t.Errorf("placement %s, want %s (binds %v)", g, tc.count, bindsOf(p))
			}
		})
	}
}

// TestRulesBoundPods: pods bound by any scheduler count (anti-affinity of
// a running replica; a running pod's host port).
func TestRulesBoundPods(t *testing.T) {
	e := newEnv(t)
	withRules(t, e)
	rulesNode(e, "a")
	rulesNode(e, "b")
	e.pod("old", reqs(gpus(1)), antiAffine("web"), onNode("a"))
	e.apply(e.decide(Config{}))
	e.pod("new", reqs(gpus(1)), antiAffine("web"))
	if got := bindsOf(e.decide(Config{}))["new"]; got != "b" {
		t.Fatalf("replica placed on %q, want b (a runs a replica)", got)
	}
}

// TestRulesPreemptionFreesPort: evicting a lower-priority pod frees its
// host port in the what-if, so the preemptor gets the node.
func TestRulesPreemptionFreesPort(t *testing.T) {
	e := newEnv(t)
	withRules(t, e)
	rulesNode(e, "a")
	e.pod("low", reqs(gpus(1)), hostPort(9999))
	e.apply(e.decide(Config{}))
	e.pod("high", reqs(gpus(1)), hostPort(9999), prio(100))
	p := e.decide(Config{})
	if got := evictedOf(p); len(got) != 1 || got[0] != "low" {
		t.Fatalf("evicted %v, want [low] (binds %v, pending %+v)", got, bindsOf(p), p.Pending)
	}
	if x, ok := pendingOf(p, "high"); !ok || x.NominatedNode != "a" {
		t.Fatalf("high: %+v, want nominated to a", x)
	}
}

// TestRulesUnresolvable: a pod whose PVC does not exist waits with
// kube-scheduler's reason and no preemption.
func TestRulesUnresolvable(t *testing.T) {
	e := newEnv(t)
	withRules(t, e)
	rulesNode(e, "a")
	e.pod("low", reqs(gpus(8)))
	e.apply(e.decide(Config{}))
	e.pod("vol", reqs(gpus(1)), prio(100), func(x *plan.Pod) {
		x.Pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "missing"}}}}
	})
	p := e.decide(Config{})
	x, ok := pendingOf(p, "vol")
	if !ok || x.Code != plan.CodeUnschedulable || !strings.Contains(x.Message, `persistentvolumeclaim "missing" not found`) {
		t.Fatalf("vol: %+v, want code %s naming the missing claim", x, plan.CodeUnschedulable)
	}
	if len(p.Evictions) > 0 {
		t.Fatalf("evictions %v for a pod no eviction helps", evictedOf(p))
	}
}

// TestNoHeadOfLineBlocking: 2,000 retried pods that cannot fit do not
// keep a new pod that fits from being considered, though they exceed the
// per-cycle cap; a retried one behind the cap waits.
func TestNoHeadOfLineBlocking(t *testing.T) {
	e := newEnv(t)
	rulesNode(e, "a")
	for i := range 2000 {
		e.pod(fmt.Sprintf("big-%04d", i), reqs(gpus(9)), retry)
	}
	e.pod("fits", reqs(gpus(1)))
	p := e.decide(Config{})
	if got := bindsOf(p)["fits"]; got != "a" {
		x, _ := pendingOf(p, "fits")
		t.Fatalf("new pod not bound (pending %+v)", x)
	}
	// The cap still holds for retries: the same pod marked as a retry,
	// behind 2,000 older retries, is not reached this cycle.
	e2 := newEnv(t)
	rulesNode(e2, "a")
	for i := range 2000 {
		e2.pod(fmt.Sprintf("big-%04d", i), reqs(gpus(9)), retry)
	}
	e2.pod("fits", reqs(gpus(1)), retry)
	x, ok := pendingOf(e2.decide(Config{}), "fits")
	if !ok || x.Code != jobs.CodeBlocked {
		t.Fatalf("retried pod behind the cap: %+v, want %s", x, jobs.CodeBlocked)
	}
}

// TestRulesPreferences: preferred node affinity and PreferNoSchedule
// taints pick among the nodes that fit, ahead of gpud's packing, which
// would fill the busier node a.
func TestRulesPreferences(t *testing.T) {
	prefer := func(n string) podOpt {
		return func(x *plan.Pod) {
			x.Pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 50,
					Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: hostnameLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{n}}}}}}}}
		}
	}
	tests := []struct {
		name string
		opt  podOpt
		want string
	}{
		{name: "packing alone", opt: func(*plan.Pod) {}, want: "a"},
		{name: "preferred affinity", opt: prefer("b"), want: "b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			withRules(t, e)
			rulesNode(e, "a")
			rulesNode(e, "b")
			e.pod("busy", reqs(gpus(4)), onNode("a"))
			e.apply(e.decide(Config{}))
			e.pod("new", reqs(gpus(1)), tc.opt)
			if got := bindsOf(e.decide(Config{}))["new"]; got != tc.want {
				t.Fatalf("new pod on %q, want %s", got, tc.want)
			}
		})
	}
	t.Run("PreferNoSchedule", func(t *testing.T) {
		e := newEnv(t)
		withRules(t, e)
		rulesNode(e, "a")
		rulesNode(e, "b")
		e.nodes[0].Spec.Taints = []corev1.Taint{{Key: "busy", Effect: corev1.TaintEffectPreferNoSchedule}}
		e.pod("busy", reqs(gpus(4)), onNode("a"))
		e.apply(e.decide(Config{}))
		e.pod("new", reqs(gpus(1)))
		if got := bindsOf(e.decide(Config{}))["new"]; got != "b" {
			t.Fatalf("new pod on %q, want b (a has a PreferNoSchedule taint)", got)
		}
	})
}
