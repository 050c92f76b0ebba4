package rules

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// freshCycle is a cycle over a snapshot built from nothing, outside r's
// kept one: what a cycle brought up to date must equal.
func freshCycle(t *testing.T, r *Rules, nodes []*corev1.Node, bound []*corev1.Pod) *Cycle {
	t.Helper()
	l, err := r.newLive(t.Context(), nodes, bound, nil)
	if err != nil {
		t.Fatalf("newLive: %v", err)
	}
	return &Cycle{ctx: t.Context(), fw: l.fw, snap: l.snap, log: r.cfg.Logger, r: r, l: l, released: map[types.UID]bool{}}
}

// describe is what the plugins see of each node: its Node object, the
// UIDs of its pods, what they request and the host ports they hold.
func describe(t *testing.T, c *Cycle) string {
	t.Helper()
	list, err := c.snap.List()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ni := range list {
		var uids []string
		for _, pi := range ni.GetPods() {
			uids = append(uids, string(pi.GetPod().UID))
		}
		slices.Sort(uids)
		req := ni.GetRequested()
		out = append(out, fmt.Sprintf("%s(%p) pods=%v cpu=%d mem=%d ports=%d affinity=%d anti=%d", ni.Node().Name, ni.Node(),
			uids, req.GetMilliCPU(), req.GetMemory(), len(ni.GetUsedPorts()), len(ni.GetPodsWithAffinity()),
			len(ni.GetPodsWithRequiredAntiAffinity())))
	}
	slices.Sort(out)
	return fmt.Sprint(out)
}

// TestLiveMatchesFresh: the snapshot kept across cycles, brought up to date
// from pods bound, replaced and gone, nodes changed, added and removed,
// after cycles that placed and evicted pods in what-ifs, shows every node
// as a snapshot built afresh does, and the plugins decide alike on it.
func TestLiveMatchesFresh(t *testing.T) {
	r := newRules(t)
	rng := rand.New(rand.NewPCG(7, 25))
	names := []string{"a", "b", "c", "d", "e"}
	nodes := map[string]*corev1.Node{}
	for _, n := range names[:4] {
		nodes[n] = node(n)
	}
	bound := map[string]*corev1.Pod{}
	next := 0
	mods := []func(*corev1.Pod){antiAffinity, hostPort, spread, func(*corev1.Pod) {}}
	newPod := func() *corev1.Pod {
		next++
		var on []string
		for n := range nodes {
			on = append(on, n)
		}
		slices.Sort(on)
		p := pod(fmt.Sprintf("p%d", next), mods[rng.IntN(len(mods))])
		p.Spec.NodeName = on[rng.IntN(len(on))]
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(100+rng.IntN(1000)), resource.DecimalSI)
		if len(p.Spec.Containers[0].Ports) > 0 {
			// A port of its own: two pods holding one host port on a node
			// do not happen, and kube-scheduler's NodeInfo keeps a port
			// once however many hold it.
			p.Spec.Containers[0].Ports[0].HostPort = int32(9000 + next)
		}
		return p
	}
	probes := []*corev1.Pod{pod("probe-anti", antiAffinity), pod("probe-port", hostPort), pod("probe-spread", spread),
		pod("probe-big", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("6")
		})}
	for step := range 60 {
		switch k := rng.IntN(10); {
		case k < 4:
			for range 1 + rng.IntN(3) {
				p := newPod()
				bound[p.Name] = p
			}
		case k < 6 && len(bound) > 0:
			for name := range bound {
				if rng.IntN(2) == 0 {
					delete(bound, name)
				}
			}
		case k < 7 && len(bound) > 0:
			for name, p := range bound { // an update: a new object, new requests
				cp := p.DeepCopy()
				cp.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("2")
				bound[name] = cp
				break
			}
		case k < 8:
			n := names[rng.IntN(len(names))]
			cp := node(n)
			cp.Status.Allocatable[corev1.ResourceCPU] = *resource.NewQuantity(int64(4+rng.IntN(8)), resource.DecimalSI)
			nodes[n] = cp // changed, or added
		case k < 9 && len(nodes) > 2:
			for n := range nodes {
				delete(nodes, n) // its pods stay bound to a node that is gone
				break
			}
		}
		var nl []*corev1.Node
		for _, n := range names {
			if nodes[n] != nil {
				nl = append(nl, nodes[n])
			}
		}
		var pl []*corev1.Pod
		for _, p := range bound {
			pl = append(pl, p)
		}
		c := newCycle(t, r, nl, pl...)
		fresh := freshCycle(t, r, nl, pl)
		if got, want := describe(t, c), describe(t, fresh); got != want {
			t.Fatalf("step %d: kept snapshot\n%s\nwant\n%s", step, got, want)
		}
		for _, p := range pl {
			if len(p.Spec.Containers[0].Ports) > 0 { // a pod wanting the port of a bound one
				probes[1].Spec.Containers[0].Ports[0].HostPort = p.Spec.Containers[0].Ports[0].HostPort
				break
			}
		}
		for _, p := range probes {
			for _, n := range nl {
				if got, want := c.Filter(p, n.Name), fresh.Filter(p, n.Name); got != want {
					t.Fatalf("step %d: %s on %s: %q, afresh %q", step, p.Name, n.Name, got, want)
				}
			}
		}
		// The cycle's own what-ifs: place new pods, evict bound ones; the
		// next cycle must not see them.
		for range rng.IntN(4) {
			p := newPod()
			if err := c.Add(p, p.Spec.NodeName); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range pl {
			if rng.IntN(4) == 0 {
				if err := c.Remove(p, p.Spec.NodeName); err != nil {
					t.Fatal(err)
				}
				if rng.IntN(2) == 0 {
					if err := c.Add(p, p.Spec.NodeName); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
}

// TestLivePodInfosReused: a bound pod's PodInfo is made once per pod object
// (the informer replaces the object on any update, so a changed pod gets a
// new one) and dropped once the pod is gone.
func TestLivePodInfosReused(t *testing.T) {
	r := newRules(t)
	nodes := []*corev1.Node{node("a")}
	a := pod("a", on("a"))
	newCycle(t, r, nodes, a)
	first := r.live.pods[a.UID]
	newCycle(t, r, nodes, a)
	if r.live.pods[a.UID] != first {
		t.Error("the same pod object got a new PodInfo")
	}
	updated := a.DeepCopy()
	updated.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("2")
	c := newCycle(t, r, nodes, updated)
	if got := r.live.pods[a.UID]; got == first || got.CalculateResource().Resource.GetMilliCPU() != 2000 {
		t.Errorf("an updated pod kept its old PodInfo (cpu %d)", got.CalculateResource().Resource.GetMilliCPU())
	}
	if got := c.Filter(pod("big", func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("6500m")
	}), "a"); got == "" {
		t.Error("6.5 CPUs fit beside the updated pod's 2 on 8: the old request still counted")
	}
	newCycle(t, r, nodes)
	if len(r.live.pods) != 0 {
		t.Errorf("%d PodInfos kept after their pods went", len(r.live.pods))
	}
}

// TestEndedCycle: a cycle a later one ended changes nothing any more, and
// its placements are gone from the later one.
func TestEndedCycle(t *testing.T) {
	r := newRules(t)
	nodes := []*corev1.Node{node("a")}
	old := newCycle(t, r, nodes)
	if err := old.Add(pod("x", hostPort), "a"); err != nil {
		t.Fatal(err)
	}
	c := newCycle(t, r, nodes)
	if got := c.Filter(pod("y", hostPort), "a"); got != "" {
		t.Errorf("the ended cycle's placement still holds its port: %s", got)
	}
	if err := old.Add(pod("z"), "a"); !errors.Is(err, ErrCycleOver) {
		t.Errorf("Add on an ended cycle: %v, want ErrCycleOver", err)
	}
}

// TestFilterAllMatchesFilter: FilterAll, the nodes checked in parallel,
// says of every node what Filter says, and the cycle remembers the same
// refusals (Rejected).
func TestFilterAllMatchesFilter(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one CPU: FilterAll runs Filter in turn")
	}
	r := newRules(t)
	var nodes []*corev1.Node
	var names []string
	var bound []*corev1.Pod
	for i := range 300 {
		n := node(fmt.Sprintf("n%03d", i))
		if i%7 == 0 {
			n.Spec.Taints = []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}
		}
		nodes, names = append(nodes, n), append(names, n.Name)
		if i%3 == 0 {
			bound = append(bound, pod(fmt.Sprintf("b%03d", i), on(n.Name), hostPort, antiAffinity))
		}
	}
	probes := []*corev1.Pod{pod("plain"), pod("anti", antiAffinity), pod("port", hostPort), pod("spread", spread),
		pod("big", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("9")
		})}
	for _, p := range probes {
		seq, par := newCycle(t, r, nodes, bound...), (*Cycle)(nil)
		var want []string
		for _, n := range names {
			want = append(want, seq.Filter(p, n))
		}
		wantRejected, wantOK := seq.Rejected(p)
		par = newCycle(t, r, nodes, bound...)
		got := par.FilterAll(p, names)
		if !slices.Equal(got, want) {
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%s on %s: FilterAll %q, Filter %q", p.Name, names[i], got[i], want[i])
				}
			}
		}
		if gotRejected, gotOK := par.Rejected(p); gotOK != wantOK || !slices.Equal(gotRejected, wantRejected) {
			t.Errorf("%s: Rejected after FilterAll %v %v, after Filter %v %v", p.Name, gotRejected, gotOK, wantRejected, wantOK)
		}
	}
}
