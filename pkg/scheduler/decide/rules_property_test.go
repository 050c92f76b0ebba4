package decide

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// TestRulesProperty places random pods with random required rules
// (anti-affinity, affinity, host ports, spread, node selectors, GPUs) on
// random small clusters, cycle after cycle, and replays every cycle's binds
// in order through kube-scheduler's own filters, as kube-scheduler would
// have met them: each bind must pass over the pods bound before it. (The
// rules hold when a pod is placed, not forever after: a pod without a
// spread constraint may later unbalance the pods that have one.)
func TestRulesProperty(t *testing.T) {
	seeds := 25
	if testing.Short() {
		seeds = 5
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 21))
			e := newEnv(t)
			withRules(t, e)
			nodes := 2 + rng.IntN(3)
			for i := range nodes {
				rulesNode(e, fmt.Sprintf("n%d", i))
				e.nodes[i].Labels["zone"] = fmt.Sprintf("z%d", i%2)
			}
			bound := 0
			for cycle := range 3 {
				for i := range 3 + rng.IntN(6) {
					randomPod(e, rng, fmt.Sprintf("c%d-p%d", cycle, i))
				}
				p := e.decide(Config{})
				bound += len(p.Binds)
				checkBinds(t, e, p)
				e.apply(p)
			}
			if bound == 0 {
				t.Logf("seed %d bound nothing", seed)
			}
		})
	}
}

// randomPod adds a pending pod with random rules.
func randomPod(e *env, rng *rand.Rand, name string) {
	var reqsOf []resourceapi.DeviceRequest
	if n := rng.IntN(4); n > 0 {
		reqsOf = reqs(gpus(int64(n)))
	}
	app := []string{"web", "db", "cache"}[rng.IntN(3)]
	opts := []podOpt{labelled("app", app)}
	term := func(v, key string) corev1.PodAffinityTerm {
		return corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": v}}, TopologyKey: key}
	}
	key := []string{hostnameLabel, "zone"}[rng.IntN(2)]
	switch rng.IntN(6) {
	case 0:
		opts = append(opts, func(x *plan.Pod) {
			x.Pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term(app, key)}}}
		})
	case 1:
		other := []string{"web", "db", "cache"}[rng.IntN(3)]
		opts = append(opts, func(x *plan.Pod) {
			x.Pod.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term(other, key)}}}
		})
	case 2:
		opts = append(opts, hostPort(int32(9000+rng.IntN(2))))
	case 3:
		opts = append(opts, func(x *plan.Pod) {
			x.Pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: key,
				WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
		})
	case 4:
		z := fmt.Sprintf("z%d", rng.IntN(2))
		opts = append(opts, func(x *plan.Pod) { x.Pod.Spec.NodeSelector = map[string]string{"zone": z} })
	}
	e.pod(name, reqsOf, opts...)
}

// checkBinds is the oracle: p's binds, in order, each allowed by
// kube-scheduler's filters over the pods bound before it.
func checkBinds(t *testing.T, e *env, p plan.Plan) {
	t.Helper()
	var pods []*corev1.Pod
	for _, b := range e.bound {
		pods = append(pods, b.Pod)
	}
	rc, err := e.rules.Cycle(context.Background(), e.nodes, pods)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range p.Binds {
		if why := rc.Filter(b.Pod.Pod, b.Node); why != "" {
			t.Errorf("bind of %s to %s breaks kube-scheduler's rules: %s", b.Pod.Key(), b.Node, why)
		}
		if err := rc.Add(b.Pod.Pod, b.Node); err != nil {
			t.Fatal(err)
		}
	}
}
