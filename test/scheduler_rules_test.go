package test

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/schedtest"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/test/k8senv"
)

// TestSchedulerRulesAgainstKubeScheduler runs the same pods through
// `gpud scheduler` and upstream kube-scheduler (the oracle) on a real
// kube-apiserver, each scheduler on its own two nodes (pool=gpud: gpud-a,
// gpud-b; pool=kube: kube-a, kube-b) and in its own namespace, and checks
// both against what kube-scheduler's rules require, case by case: a case
// that must place and one that must be refused. Nodes "a" have one
// example.com/nic; every node carries gpud's ResourceSlices (gpud
// scheduler places only on nodes it has a view of). The only controller
// running is kube-controller-manager's resource claim controller.
func TestSchedulerRulesAgainstKubeScheduler(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver, kube-scheduler and gpud scheduler")
	}
	begin := time.Now()
	bin := buildGpud(t)
	env := k8senv.Start(t)
	c := env.Client
	kubeconfig := schedulerIdentity(t, env)
	rulesRBAC(t, env)

	for _, pool := range []string{"gpud", "kube"} {
		for _, x := range []string{"a", "b"} {
			name := pool + "-" + x
			env.CreateNode(t, name, map[string]string{"pool": pool}, func(n *corev1.Node) {
				if x == "a" {
					n.Status.Capacity["example.com/nic"] = resource.MustParse("1")
					n.Status.Allocatable["example.com/nic"] = resource.MustParse("1")
				}
			})
			_, sl := schedtest.Publish(t, name, schedtest.SimState(t, "dgx-h100", name))
			for _, s := range sl {
				if _, err := c.ResourceV1().ResourceSlices().Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
					t.Fatalf("slice %s: %v", s.Name, err)
				}
			}
		}
		if _, err := c.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rules-" + pool}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		localPVs(t, env, pool)
	}
	claimsSetup(t, env)
	// Claims from ResourceClaimTemplates are made by this controller, for
	// both schedulers, as in a cluster.
	env.StartControllerManager(t, "resourceclaim-controller")
	sched := startSchedulerProc(t, bin, filepath.Join(shortDir(t), "sched"), kubeconfig)
	waitForLeader(t, []*schedProc{sched}, nil)
	t.Logf("environment up in %s", time.Since(begin).Round(time.Millisecond))

	for _, tc := range rulesCases() {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			got := map[string]map[string]string{}
			if tc.nodeA != nil {
				defer changeNodeA(t, env, tc.nodeA)()
			}
			for _, pool := range []string{"gpud", "kube"} {
				for _, p := range tc.pods {
					createRulesPod(t, env, pool, p)
				}
			}
			for _, pool := range []string{"gpud", "kube"} {
				got[pool] = settle(t, env, pool, tc.pods)
			}
			t.Logf("gpud scheduler %v, kube-scheduler %v (%s)", got["gpud"], got["kube"], time.Since(start).Round(time.Millisecond))
			for _, pool := range []string{"gpud", "kube"} {
				if err := tc.check(got[pool]); err != nil {
					t.Errorf("%s: %v", map[string]string{"gpud": "gpud scheduler", "kube": "kube-scheduler (oracle)"}[pool], err)
				}
			}
			if tc.exact && !maps.Equal(got["gpud"], got["kube"]) {
				t.Errorf("schedulers disagree: gpud %v, kube-scheduler %v", got["gpud"], got["kube"])
			}
			if tc.gpudReason != nil {
				for pod, want := range tc.gpudReason {
					msg := podMessage(t, env, "rules-gpud", pod)
					if !strings.Contains(msg, want) {
						t.Errorf("gpud scheduler's reason for %s: %q, want %q", pod, msg, want)
					}
				}
			}
		})
	}

	// DRA claim shapes gpud's policy does not model itself: kube-scheduler's
	// structured allocator allocates them on the node gpud chooses.
	for _, tc := range claimCases() {
		t.Run("claims "+tc.name, func(t *testing.T) { runClaimCase(t, env, tc) })
	}

	t.Run("volumes WaitForFirstConsumer", func(t *testing.T) { testWaitForFirstConsumer(t, env) })

	// Extended resources backed by DRA: nvidia.com/gpu through the
	// gpu.gpud.io DeviceClass's extendedResourceName.
	t.Run("extended resource through a DeviceClass", func(t *testing.T) { testExtendedResource(t, env) })
	// The same resource on a device-plugin node next to a DRA node:
	// served per node, a claim only on the DRA node.
	t.Run("extended resource per node, device plugin or DeviceClass", func(t *testing.T) { testExtendedResourcePerNode(t, env) })

	// Scheduling gates: a gated pod is never scheduled, and is once the
	// gate is lifted.
	t.Run("scheduling gates", func(t *testing.T) {
		for _, pool := range []string{"gpud", "kube"} {
			createRulesPod(t, env, pool, rulesPod{name: "gated", mod: func(p *corev1.Pod) {
				p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/admission"}}
			}})
		}
		time.Sleep(5 * time.Second) // several gpud cycles (--resync-period 2s)
		for _, pool := range []string{"gpud", "kube"} {
			p, err := c.CoreV1().Pods("rules-"+pool).Get(t.Context(), "gated", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec.NodeName != "" {
				t.Errorf("%s: gated pod bound to %s", pool, p.Spec.NodeName)
			}
			p.Spec.SchedulingGates = nil
			if _, err := c.CoreV1().Pods(p.Namespace).Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for _, pool := range []string{"gpud", "kube"} {
			env.WaitForPodBound(t, "rules-"+pool, "gated", schedTimeout)
		}
	})
	t.Logf("total %s", time.Since(begin).Round(time.Millisecond))
}

// rulesPod is one pod of a case; the test adds its pool's nodeSelector,
// namespace and scheduler.
type rulesPod struct {
	name string
	mod  func(*corev1.Pod)
	// after names pods that must be bound before this one is created.
	after []string
}

type rulesCase struct {
	name string
	pods []rulesPod
	// check judges one scheduler's outcome: pod → node without the pool
	// prefix ("a", "b"), "" for a pod left unschedulable.
	check func(map[string]string) error
	// exact: both schedulers must agree pod by pod (the rules leave one
	// answer).
	exact bool
	// gpudReason: substrings of gpud scheduler's PodScheduled message.
	gpudReason map[string]string
	// nodeA, if set, changes node a of each pool (its spec: taints,
	// cordon) for the case; the spec is restored afterwards.
	nodeA func(*corev1.Node)
}

// changeNodeA applies tc.nodeA to node a of both pools and returns what
// restores their specs.
func changeNodeA(t *testing.T, env *k8senv.Env, change func(*corev1.Node)) func() {
	t.Helper()
	var saved []corev1.Node
	for _, pool := range []string{"gpud", "kube"} {
		n, err := env.Client.CoreV1().Nodes().Get(t.Context(), pool+"-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		saved = append(saved, *n.DeepCopy())
		change(n)
		if _, err := env.Client.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return func() {
		for _, old := range saved {
			n, err := env.Client.CoreV1().Nodes().Get(t.Context(), old.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			n.Spec = old.Spec
			if _, err := env.Client.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func rulesCases() []rulesCase {
	app := func(v string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Labels = map[string]string{"app": v} }
	}
	both := func(fs ...func(*corev1.Pod)) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			for _, f := range fs {
				f(p)
			}
		}
	}
	term := func(v string) corev1.PodAffinityTerm {
		return corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": v}},
			TopologyKey: corev1.LabelHostname}
	}
	anti := func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term("anti")}}}
	}
	affine := func(v string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term(v)}}}
		}
	}
	spread := func(v string, minDomains *int32) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
				WhenUnsatisfiable: corev1.DoNotSchedule, MinDomains: minDomains,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": v}}}}
		}
	}
	port := func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 9999, Protocol: corev1.ProtocolTCP}}
	}
	nic := func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests["example.com/nic"] = resource.MustParse("1")
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"example.com/nic": resource.MustParse("1")}
	}
	prefer := func(x string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100,
					Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname,
						Operator: corev1.NodeSelectorOpIn, Values: []string{p.Spec.NodeSelector["pool"] + "-" + x}}}}}}}}
		}
	}
	names := func(prefix string, n int, mod func(*corev1.Pod)) []rulesPod {
		var out []rulesPod
		for i := range n {
			out = append(out, rulesPod{name: fmt.Sprintf("%s-%d", prefix, i), mod: mod})
		}
		return out
	}
	taint := corev1.Taint{Key: "dedicated", Value: "team-x", Effect: corev1.TaintEffectNoSchedule}
	tolerate := func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "team-x", Effect: corev1.TaintEffectNoSchedule}}
	}
	return []rulesCase{
		{name: "NoSchedule taint", nodeA: func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, taint) },
			pods: []rulesPod{{name: "taint-0", mod: app("taint")}, {name: "taint-1", mod: app("taint")},
				{name: "taint-tolerant", mod: both(app("taint"), tolerate, onNode("a"))}},
			check: exactly(map[string]string{"taint-0": "b", "taint-1": "b", "taint-tolerant": "a"}), exact: true},
		{name: "cordoned node", nodeA: func(n *corev1.Node) { n.Spec.Unschedulable = true },
			pods:  []rulesPod{{name: "cordon-0", mod: app("cordon")}, {name: "cordon-on-a", mod: both(app("cordon"), onNode("a"))}},
			check: exactly(map[string]string{"cordon-0": "b", "cordon-on-a": ""}), exact: true},
		{name: "required anti-affinity", pods: names("anti", 3, both(app("anti"), anti)),
			check: perNode("a=1 b=1 pending=1", true)},
		{name: "required affinity", pods: []rulesPod{
			{name: "anchor", mod: both(app("anchor"), onNode("b"))},
			{name: "follower", mod: both(app("follower"), affine("anchor")), after: []string{"anchor"}},
			{name: "orphan", mod: both(app("orphan"), affine("nobody"))},
		}, check: exactly(map[string]string{"anchor": "b", "follower": "b", "orphan": ""}), exact: true},
		{name: "spread maxSkew 1", pods: names("spread", 4, both(app("spread"), spread("spread", nil))),
			check: perNode("a=2 b=2", true)},
		{name: "spread minDomains 3 on 2 nodes", pods: names("mind", 3, both(app("mind"), spread("mind", ptr.To[int32](3)))),
			check: perNode("a=1 b=1 pending=1", true)},
		{name: "host port", pods: names("port", 3, both(app("port"), port)), check: perNode("a=1 b=1 pending=1", true)},
		{name: "extended resource", pods: names("nic", 2, both(app("nic"), nic)), check: perNode("a=1 pending=1", false)},
		{name: "preferred node affinity", pods: []rulesPod{{name: "pref-b", mod: both(app("pref"), prefer("b"))},
			{name: "pref-a", mod: both(app("pref"), prefer("a"))}},
			check: exactly(map[string]string{"pref-b": "b", "pref-a": "a"}), exact: true},
		{name: "volumes", pods: []rulesPod{
			{name: "vol-a", mod: both(app("vol"), vol("data-a"))},
			{name: "vol-b", mod: both(app("vol"), vol("data-b"))},
			{name: "vol-missing", mod: both(app("vol"), vol("no-such-claim"))},
		}, check: exactly(map[string]string{"vol-a": "a", "vol-b": "b", "vol-missing": ""}), exact: true,
			gpudReason: map[string]string{"vol-missing": `persistentvolumeclaim "no-such-claim" not found`}},
	}
}

// perNode checks pods per node, "a=1 b=1 pending=1"; with swap, a and b
// may trade places (the rules do not tell the nodes apart).
func perNode(want string, swap bool) func(map[string]string) error {
	return func(got map[string]string) error {
		count := map[string]int{}
		for _, n := range got {
			if n == "" {
				n = "pending"
			}
			count[n]++
		}
		var parts []string
		for _, k := range []string{"a", "b", "pending"} {
			if count[k] > 0 {
				parts = append(parts, fmt.Sprintf("%s=%d", k, count[k]))
			}
		}
		swapped := map[string]int{"a": count["b"], "b": count["a"], "pending": count["pending"]}
		var alt []string
		for _, k := range []string{"a", "b", "pending"} {
			if swapped[k] > 0 {
				alt = append(alt, fmt.Sprintf("%s=%d", k, swapped[k]))
			}
		}
		if g := strings.Join(parts, " "); g != want && (!swap || strings.Join(alt, " ") != want) {
			return fmt.Errorf("placed %s (%v), want %s", g, got, want)
		}
		return nil
	}
}

// exactly checks each pod's node.
func exactly(want map[string]string) func(map[string]string) error {
	return func(got map[string]string) error {
		if !maps.Equal(got, want) {
			return fmt.Errorf("placed %v, want %v", got, want)
		}
		return nil
	}
}

// createRulesPod creates p in rules-<pool> for pool's scheduler, limited to
// pool's nodes, after the pods it waits for are bound.
func createRulesPod(t *testing.T, env *k8senv.Env, pool string, rp rulesPod) {
	t.Helper()
	ns := "rules-" + pool
	for _, a := range rp.after {
		env.WaitForPodBound(t, ns, a, schedTimeout)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: rp.name, Namespace: ns},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"pool": pool}, Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}}
	if pool == "gpud" {
		p.Spec.SchedulerName = schedName
	}
	if rp.mod != nil {
		rp.mod(p)
	}
	if _, err := env.Client.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("pod %s/%s: %v", ns, rp.name, err)
	}
}

// settle waits until each pod is bound or marked unschedulable, and stays
// so for 3 s (a scheduler that marks a pod and binds it a cycle later is
// caught), and returns pod → node without the pool prefix ("" pending).
func settle(t *testing.T, env *k8senv.Env, pool string, pods []rulesPod) map[string]string {
	t.Helper()
	ns := "rules-" + pool
	read := func() (map[string]string, bool) {
		out := map[string]string{}
		done := true
		for _, rp := range pods {
			p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), rp.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec.NodeName != "" {
				out[rp.name] = strings.TrimPrefix(p.Spec.NodeName, pool+"-")
				continue
			}
			out[rp.name] = ""
			if !slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
			}) {
				done = false
			}
		}
		return out, done
	}
	var got map[string]string
	testwait.For(t, schedTimeout, pool+": every pod bound or unschedulable", func() bool {
		var done bool
		got, done = read()
		return done
	})
	time.Sleep(3 * time.Second)
	again, _ := read()
	if !maps.Equal(got, again) {
		t.Errorf("%s: placement changed after settling: %v, then %v", pool, got, again)
	}
	return again
}

// podMessage is the pod's PodScheduled message.
func podMessage(t *testing.T, env *k8senv.Env, ns, name string) string {
	t.Helper()
	p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Message
		}
	}
	return ""
}

// localPVs makes, for pool's nodes a and b, a local PersistentVolume with
// node affinity to the node and a claim data-<x> bound to it, as the PV
// controller (not running here) leaves them.
func localPVs(t *testing.T, env *k8senv.Env, pool string) {
	t.Helper()
	c := env.Client
	ctx := t.Context()
	ns := "rules-" + pool
	if pool == "gpud" {
		wffc := storagev1.VolumeBindingWaitForFirstConsumer
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: "kubernetes.io/no-provisioner",
			VolumeBindingMode: &wffc}
		if _, err := c.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range []string{"a", "b"} {
		node := pool + "-" + x
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "local-" + node},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName:       "local",
				PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/data"}},
				ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: "data-" + x},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn,
						Values: []string{node}}}}}}},
			}}
		pv, err := c.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pv.Status.Phase = corev1.VolumeBound
		if _, err := c.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-" + x, Namespace: ns,
			Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes"}},
			Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv.Name, StorageClassName: ptr.To("local"),
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		pvc, err = c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pvc.Status.Phase = corev1.ClaimBound
		pvc.Status.AccessModes = pvc.Spec.AccessModes
		pvc.Status.Capacity = pvc.Spec.Resources.Requests
		if _, err := c.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// rulesRBAC grants gpud-scheduler's service account the reads
// kube-scheduler's plugins need beyond deploy/scheduler/rbac.yaml
// (what `gpud scheduler` needs to honour volume, spread and affinity
// rules): kube-scheduler's own role reads the same.
func rulesRBAC(t *testing.T, env *k8senv.Env) {
	t.Helper()
	read := []string{"get", "list", "watch"}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gpud-scheduler-rules"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims", "persistentvolumes", "namespaces", "services",
			"replicationcontrollers"}, Verbs: read},
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims", "persistentvolumes"}, Verbs: []string{"update"}},
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets", "statefulsets"}, Verbs: read},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses", "csinodes", "csidrivers",
			"csistoragecapacities", "volumeattachments"}, Verbs: read},
	}}
	if _, err := env.Client.RbacV1().ClusterRoles().Create(t.Context(), cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gpud-scheduler-rules"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: cr.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "gpud", Name: "gpud-scheduler"}}}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(t.Context(), crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// vol gives the pod one volume from the PersistentVolumeClaim claim.
func vol(claim string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	}
}
