package rules

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// TestRejectedAndHints: a pod refused on both nodes by required
// anti-affinity and host ports is Rejected by those plugins; what a
// what-if (running pods released) allows does not count; a pod allowed
// somewhere is not Rejected. The plugins' queueing hints then decide which
// events may help: the deletion of a pod holding the port may, that of a
// pod without ports or labels the pod avoids may not, and a node added
// may.
func TestRejectedAndHints(t *testing.T) {
	r := newRules(t)
	holder := pod("holder", on("a"), hostPort, func(p *corev1.Pod) { p.Labels = map[string]string{"app": "db"} })
	web := pod("web-b", on("b"))
	c := newCycle(t, r, []*corev1.Node{node("a"), node("b")}, holder, web)
	p := pod("p", hostPort, antiAffinity)
	// A what-if without the pods allows both nodes: not counted.
	_ = c.Remove(holder, "a")
	_ = c.Remove(web, "b")
	if ok, _ := allowed(c, p, "a", "b"); len(ok) != 2 {
		t.Fatalf("with the pods released: allowed %v, want both", ok)
	}
	_ = c.Add(holder, "a")
	_ = c.Add(web, "b")
	if ok, _ := allowed(c, p, "a", "b"); len(ok) != 0 {
		t.Fatalf("allowed %v, want none", ok)
	}
	by, rejected := c.Rejected(p)
	if !rejected || !slices.Equal(by, []string{"InterPodAffinity", "NodePorts"}) {
		t.Fatalf("Rejected %v %v, want [InterPodAffinity NodePorts]", by, rejected)
	}
	free := pod("free")
	allowed(c, free, "a", "b")
	if by, rejected := c.Rejected(free); rejected {
		t.Errorf("a pod allowed on both nodes is Rejected by %v", by)
	}
	ports := pod("ports", hostPort)
	allowed(c, ports, "a")
	if by, rejected := c.Rejected(ports); rejected {
		t.Errorf("a pod asked about on one node of two is Rejected by %v", by)
	}

	del := []fwk.ClusterEvent{framework.EventAssignedPodDelete}
	if !r.MayHelp(p, []string{"NodePorts"}, del, holder, nil) {
		t.Error("the port holder's deletion may not help a pod NodePorts refused")
	}
	if r.MayHelp(p, []string{"NodePorts"}, del, pod("plain", on("a")), nil) {
		t.Error("a pod without host ports deleted may help a pod NodePorts refused")
	}
	if !r.MayHelp(p, []string{"InterPodAffinity"}, del, web, nil) {
		t.Error("the deletion of the pod the anti-affinity avoids may not help")
	}
	if r.MayHelp(p, []string{"InterPodAffinity"}, del, holder, nil) {
		t.Error("the deletion of a pod the anti-affinity does not select may help")
	}
	if !r.MayHelp(p, []string{"NodePorts"}, []fwk.ClusterEvent{{Resource: fwk.Node, ActionType: fwk.Add}}, nil, node("c")) {
		t.Error("a node added may not help a pod NodePorts refused")
	}
	if !r.MayHelp(p, []string{"no-such-plugin"}, del, holder, nil) {
		t.Error("an unknown plugin's refusal is not helped by every event")
	}
}
