package view

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
)

// shareID is a fraction's share ID in describe's output (random per
// placement).
var shareID = regexp.MustCompile(`#[0-9a-f-]{36}`)

// versioned gives every slice a UID and resourceVersion, as the informer's
// objects have.
func versioned(c *cluster) {
	for i, s := range c.in.Slices {
		s = s.DeepCopy()
		s.UID = types.UID(fmt.Sprint("uid-", s.Name))
		s.ResourceVersion = "1"
		c.in.Slices[i] = s
	}
}

// nodeFacts is what a node holds that a cached parse must reproduce.
func nodeFacts(n *Node) string {
	gpus := make([]GPU, len(n.GPUs))
	for i, g := range n.GPUs {
		g.wholeDev, g.migDevs, g.labels = nil, nil, [2]map[string]string{} // labels: cached on use
		gpus[i] = g
	}
	devs := make([]Device, len(n.devs))
	for i, d := range n.devs {
		devs[i] = *d
		devs[i].node = nil
	}
	return fmt.Sprintf("%s gen %d gpus %+v devs %+v counters %v", n.Name, n.Generation, gpus, devs, n.Counters)
}

// TestPoolCacheMatchesFresh: views built through a PoolCache hold the same
// nodes as views parsed afresh and place random claims exactly alike; the
// next view takes over the nodes whose slices and Node objects did not
// change; a slice changed at a new resourceVersion is parsed again, and a
// node whose Node object changed is made again.
func TestPoolCacheMatchesFresh(t *testing.T) {
	c := mixedCluster(t, 6)
	versioned(c)
	fresh, skips := Build(c.in)
	if len(skips) > 0 {
		t.Fatalf("skips: %v", skips)
	}
	cached := c.in
	cached.Pools = NewPoolCache()
	first, _ := Build(cached)  // parses, fills the cache
	second, _ := Build(cached) // from the cache
	for _, v := range []*View{first, second} {
		if len(v.nodes) != len(fresh.nodes) || len(v.devs) != len(fresh.devs) {
			t.Fatalf("cached view: %d nodes %d devices, fresh %d %d", len(v.nodes), len(v.devs), len(fresh.nodes), len(fresh.devs))
		}
		for i, n := range v.nodes {
			if got, want := nodeFacts(n), nodeFacts(fresh.nodes[i]); got != want {
				t.Fatalf("cached node:\n%s\nfresh:\n%s", got, want)
			}
			for g := range n.GPUs {
				gp := &n.GPUs[g]
				if gp.Whole != "" && gp.wholeDev != n.Devices[gp.Whole] {
					t.Fatalf("node %s GPU %d: whole device not the view's own", n.Name, g)
				}
			}
		}
	}
	for i, d := range first.devs {
		if d != second.devs[i] || d.node != second.devs[i].node {
			t.Fatalf("device %s: the second view made its own, want the first view's taken over", d.Name)
		}
		if second.devs[i].id != int32(i) {
			t.Fatalf("device %s: id %d, want %d", d.Name, second.devs[i].id, i)
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 40 {
		cl := randomClaim(rng, i)
		want := shareID.ReplaceAllString(describe(place(t, fresh, Options{}, cl)), "#share")
		if got := shareID.ReplaceAllString(describe(place(t, second, Options{}, cl)), "#share"); got != want {
			t.Fatalf("claim %d: cached view places %s, fresh %s", i, got, want)
		}
	}

	// A changed slice at a new resourceVersion is parsed again.
	var changed *resourceapi.ResourceSlice
	for i, s := range cached.Slices {
		if s.Spec.NodeName != nil && *s.Spec.NodeName == "node-02" && len(s.Spec.Devices) > 0 {
			s = s.DeepCopy()
			s.ResourceVersion = "2"
			model := "NVIDIA Test GPU"
			a := s.Spec.Devices[0].Attributes["productName"]
			a.StringValue = &model
			s.Spec.Devices[0].Attributes["productName"] = a
			cached.Slices[i], changed = s, s
			break
		}
	}
	if changed == nil {
		t.Fatal("no slice of node-02")
	}
	before := second.Node("node-02")
	third, _ := Build(cached)
	for _, n := range third.nodes {
		if taken := n == second.Node(n.Name); taken != (n.Name != "node-02") {
			t.Errorf("node %s taken over from the last view: %v, want %v (only node-02's slice changed)", n.Name, taken, n.Name != "node-02")
		}
	}
	n := third.Node("node-02")
	dev := n.Devices[changed.Spec.Devices[0].Name]
	if got := n.GPUs[dev.GPU].Model; got != "NVIDIA Test GPU" {
		t.Errorf("node-02 after its slice changed: model %q, want the new one", got)
	}
	if got := before.GPUs[0].Model; got == "NVIDIA Test GPU" {
		t.Errorf("an earlier view's node changed with the cache")
	}

	// A Node object changed (a new label): its node is made again, from
	// the parsed pool, with the label.
	for i, kn := range cached.Nodes {
		if kn.Name == "node-03" {
			kn = kn.DeepCopy()
			kn.Labels = map[string]string{"zone": "b"}
			cached.Nodes[i] = kn
		}
	}
	old := third.Node("node-03")
	fourth, _ := Build(cached)
	n = fourth.Node("node-03")
	if n == old || n.Labels["zone"] != "b" {
		t.Fatalf("node-03 after its Node changed: taken over %v, labels %v; want a new node with zone=b", n == old, n.Labels)
	}
	for name, d := range n.Devices {
		if d == old.Devices[name] {
			t.Fatalf("node-03's device %s is the old node's", name)
		}
	}
	if got, want := nodeFacts(n), nodeFacts(fresh.Node("node-03")); got != want {
		t.Fatalf("node-03 made from the parsed pool:\n%s\nfresh:\n%s", got, want)
	}
	if fourth.Node("node-04") != third.Node("node-04") {
		t.Errorf("node-04 not taken over, though nothing of it changed")
	}
}

// TestPoolCacheKeepsSkips: a pool with a device the view refuses is
// reported on every view, cached or not.
func TestPoolCacheKeepsSkips(t *testing.T) {
	c := mixedCluster(t, 1)
	versioned(c)
	i := slices.IndexFunc(c.in.Slices, func(s *resourceapi.ResourceSlice) bool { return len(s.Spec.Devices) > 0 })
	bad := c.in.Slices[i].DeepCopy()
	bad.Spec.Devices[0].Name = "Not_A_Label"
	c.in.Slices[i] = bad
	c.in.Pools = NewPoolCache()
	_, first := Build(c.in)
	_, second := Build(c.in)
	if len(first) == 0 || !reflect.DeepEqual(first, second) {
		t.Errorf("skips: first view %v, cached view %v; want the same, non-empty", first, second)
	}
}

// TestPoolCacheSeesTaintRules: a DeviceTaintRule reaches the view as a
// copy of the slice with the device's taint and the same
// resourceVersion (kube-scheduler's slice tracker): the cached pool must
// not hide it.
func TestPoolCacheSeesTaintRules(t *testing.T) {
	c := mixedCluster(t, 1)
	versioned(c)
	c.in.Pools = NewPoolCache()
	i := slices.IndexFunc(c.in.Slices, func(s *resourceapi.ResourceSlice) bool { return len(s.Spec.Devices) > 0 })
	name := c.in.Slices[i].Spec.Devices[0].Name
	node := *c.in.Slices[i].Spec.NodeName
	if v, _ := Build(c.in); len(v.Node(node).Devices[name].Taints) != 0 {
		t.Fatalf("device %s tainted before the rule", name)
	}
	tainted := c.in.Slices[i].DeepCopy() // same resourceVersion
	tainted.Spec.Devices[0].Taints = []resourceapi.DeviceTaint{{Key: "example.com/maintenance", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	c.in.Slices[i] = tainted
	v, _ := Build(c.in)
	if got := v.Node(node).Devices[name].Taints; len(got) != 1 || got[0].Key != "example.com/maintenance" {
		t.Errorf("device %s after a DeviceTaintRule: taints %v, want the rule's", name, got)
	}
}
