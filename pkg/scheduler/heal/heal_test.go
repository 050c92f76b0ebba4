package heal

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

const badUUID = "GPU-bad"

func gpuDev(node, uuid string) Device { return Device{Node: node, Name: "gpu-x", UUID: uuid} }

// pod makes a running pod on node holding the GPUs uuids.
func pod(name, node string, uuids ...string) Pod {
	p := Pod{Key: "default/" + name, UID: "uid-" + name, Node: node, Started: t0.Add(-time.Hour)}
	for _, u := range uuids {
		p.Devices = append(p.Devices, gpuDev(node, u))
	}
	return p
}

func failedOn(node string) map[DeviceKey]string {
	return map[DeviceKey]string{{node, badUUID}: "Xid 79"}
}

func keys(rs []Removal) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Pod.Key)
	}
	return out
}

func mustNew(t *testing.T, cfg Config) *Healer {
	t.Helper()
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestPlan(t *testing.T) {
	gang := func(name, node string, uuids ...string) Pod {
		p := pod(name, node, uuids...)
		p.Group = "default/g"
		return p
	}
	ckpt := func(p Pod, ago time.Duration) Pod {
		p.Checkpointable = true
		if ago > 0 {
			p.LastCheckpoint = t0.Add(-ago)
		}
		return p
	}
	annotated := func(p Pod, v string) Pod { p.Annotation = v; return p }
	tests := []struct {
		name        string
		pods        []Pod
		minMember   int // of gang default/g; 0: unknown
		want        []string
		wantAction  []Action
		wantLeft    []string
		wantInvalid string
	}{
		{name: "healthy pods stay", pods: []Pod{pod("a", "n1", "GPU-1"), pod("b", "n1", "GPU-2")}},
		{name: "pod on the failed GPU goes, its neighbour stays",
			pods: []Pod{pod("a", "n1", "GPU-1"), pod("b", "n1", "GPU-2", badUUID)}, want: []string{"default/b"}, wantAction: []Action{Evict}},
		{name: "same UUID on another node is not failed", pods: []Pod{pod("a", "n2", badUUID)}},
		{name: "gang loses all members, on other nodes too",
			pods: []Pod{gang("g-0", "n1", "GPU-1", badUUID), gang("g-1", "n2", "GPU-3"), pod("c", "n2", "GPU-4")},
			want: []string{"default/g-0", "default/g-1"}},
		{name: "elastic gang loses only the member on the failed GPU",
			pods:      []Pod{gang("g-0", "n1", badUUID), gang("g-1", "n2", "GPU-3"), gang("g-2", "n2", "GPU-4"), gang("g-3", "n3", "GPU-5")},
			minMember: 2, want: []string{"default/g-0"}},
		{name: "elastic gang at its minimum goes whole",
			pods:      []Pod{gang("g-0", "n1", badUUID), gang("g-1", "n2", "GPU-3")},
			minMember: 2, want: []string{"default/g-0", "default/g-1"}},
		{name: "elastic gang that would drop below minMember goes whole",
			pods:      []Pod{gang("g-0", "n1", badUUID), gang("g-1", "n1", "GPU-1", badUUID), gang("g-2", "n2", "GPU-4")},
			minMember: 2, want: []string{"default/g-0", "default/g-1", "default/g-2"}},
		{name: "elastic gang: a healthy member annotated keep does not keep the failed one",
			pods:      []Pod{gang("g-0", "n1", badUUID), annotated(gang("g-1", "n2", "GPU-3"), "keep"), gang("g-2", "n2", "GPU-4")},
			minMember: 1, want: []string{"default/g-0"}},
		{name: "elastic gang: the failed member annotated keep stays",
			pods:      []Pod{annotated(gang("g-0", "n1", badUUID), "keep"), gang("g-1", "n2", "GPU-3"), gang("g-2", "n2", "GPU-4")},
			minMember: 1, wantLeft: []string{"default/g-0"}},
		{name: "gang member annotated keep keeps the gang",
			pods: []Pod{gang("g-0", "n1", badUUID), annotated(gang("g-1", "n2", "GPU-3"), "keep")}, wantLeft: []string{"default/g-0"}},
		{name: "keep leaves the pod alone", pods: []Pod{annotated(pod("a", "n1", badUUID), " Keep ")}, wantLeft: []string{"default/a"}},
		{name: "delete per annotation", pods: []Pod{annotated(pod("a", "n1", badUUID), "delete")},
			want: []string{"default/a"}, wantAction: []Action{Delete}},
		{name: "bad annotation: reported, default applies", pods: []Pod{annotated(pod("a", "n1", badUUID), "kep")},
			want: []string{"default/a"}, wantAction: []Action{Evict}, wantInvalid: `annotation gpud.io/on-gpu-failure "kep" is not one of evict, delete, keep`},
		// plain started a minute ago (loses least) and still goes last.
		{name: "checkpointable first, least work lost first",
			pods: []Pod{func() Pod { p := pod("plain", "n1", badUUID); p.Started = t0.Add(-time.Minute); return p }(), ckpt(pod("old-ckpt", "n1", badUUID), 50*time.Minute),
				ckpt(pod("new-ckpt", "n1", badUUID), 5*time.Minute), ckpt(pod("no-ckpt-time", "n1", badUUID), 0)},
			want: []string{"default/new-ckpt", "default/old-ckpt", "default/no-ckpt-time", "default/plain"}},
		{name: "terminating pods are left to go", pods: []Pod{func() Pod { p := pod("a", "n1", badUUID); p.Terminating = true; return p }()}},
		{name: "MIG device of a failed GPU", pods: []Pod{{Key: "default/m", UID: "m", Node: "n1",
			Devices: []Device{{Node: "n1", Name: "gpu-0-mig-1g10gb-0", UUID: "MIG-1", ParentUUID: badUUID}}}}, want: []string{"default/m"}},
		{name: "NoExecute taint", pods: []Pod{{Key: "default/t", UID: "t", Node: "n9",
			Devices: []Device{{Node: "n9", Name: "gpu-1", UUID: "GPU-ok", Taint: "maintenance"}}}}, want: []string{"default/t"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := mustNew(t, Config{})
			in := Input{Pods: tc.pods, Unhealthy: failedOn("n1"), Now: t0}
			if tc.minMember > 0 {
				in.MinMember = map[string]int{"default/g": tc.minMember}
			}
			p := h.Plan(in)
			if got := strings.Join(keys(p.Removals), ","); got != strings.Join(tc.want, ",") {
				t.Errorf("removals %s, want %s", got, strings.Join(tc.want, ","))
			}
			for i, a := range tc.wantAction {
				if i < len(p.Removals) && p.Removals[i].Action != a {
					t.Errorf("removal %d action %s, want %s", i, p.Removals[i].Action, a)
				}
			}
			var left []string
			for _, l := range p.Left {
				left = append(left, l.Pod.Key)
				if !l.Kept {
					t.Errorf("left %s not kept", l.Pod.Key)
				}
			}
			if strings.Join(left, ",") != strings.Join(tc.wantLeft, ",") {
				t.Errorf("left %v, want %v", left, tc.wantLeft)
			}
			switch {
			case tc.wantInvalid == "" && len(p.Invalid) > 0:
				t.Errorf("invalid %v", p.Invalid)
			case tc.wantInvalid != "" && (len(p.Invalid) != 1 || !strings.Contains(p.Invalid[0].Message, tc.wantInvalid)):
				t.Errorf("invalid %+v, want one with %q", p.Invalid, tc.wantInvalid)
			}
		})
	}
}

func TestRemovalWhyNamesGPUAndReason(t *testing.T) {
	h := mustNew(t, Config{})
	a, b := pod("a", "n1", badUUID), pod("b", "n2", "GPU-2")
	a.Group, b.Group = "default/g", "default/g"
	p := h.Plan(Input{Pods: []Pod{a, b}, Unhealthy: failedOn("n1"), Now: t0})
	if len(p.Removals) != 2 {
		t.Fatalf("removals %v", keys(p.Removals))
	}
	if got, want := p.Removals[0].Why(), "GPU GPU-bad on node n1 failed (Xid 79), reported by the telemetry stream"; got != want {
		t.Errorf("Why() = %q, want %q", got, want)
	}
	if got, want := p.Removals[1].Why(), "gang default/g member default/a lost GPU GPU-bad on node n1 (Xid 79), reported by the telemetry stream"; got != want {
		t.Errorf("mate Why() = %q, want %q", got, want)
	}
}

// A gang whose failed member went first still loses the rest: the
// healer remembers what it chose (an eviction a budget refused, a
// member gone before its mate).
func TestGangFinishedAfterFailedMemberGone(t *testing.T) {
	h := mustNew(t, Config{})
	a, b := pod("a", "n1", badUUID), pod("b", "n2", "GPU-2")
	a.Group, b.Group = "default/g", "default/g"
	if p := h.Plan(Input{Pods: []Pod{a, b}, Unhealthy: failedOn("n1"), Now: t0}); len(p.Removals) != 2 {
		t.Fatalf("first plan removals %v", keys(p.Removals))
	}
	// b's eviction failed; a is gone.
	p := h.Plan(Input{Pods: []Pod{b}, Unhealthy: failedOn("n1"), Now: t0.Add(time.Second)})
	if got := keys(p.Removals); len(got) != 1 || got[0] != "default/b" {
		t.Fatalf("second plan removals %v, want default/b again", got)
	}
	if p.Removals[0].Attempt != 1 || p.Removals[0].Mate != "default/a" {
		t.Errorf("retry %+v: want attempt 1 (no new backoff step) naming the mate", p.Removals[0])
	}
	// b gone too: nothing more.
	if p := h.Plan(Input{Unhealthy: failedOn("n1"), Now: t0.Add(2 * time.Second)}); len(p.Removals) != 0 {
		t.Errorf("removals %v after all went", keys(p.Removals))
	}
}

// A workload that fails on every GPU: each new pod of the owner lands on
// a failed GPU again. Healings back off 1m, 2m, 4m, ... up to the max.
func TestBackoff(t *testing.T) {
	h := mustNew(t, Config{BackoffBase: time.Minute, BackoffMax: 4 * time.Minute})
	now := t0
	var gaps []time.Duration
	last := now
	gen := 0
	for now.Before(t0.Add(30 * time.Minute)) {
		gen++
		p := pod("job-x-"+string(rune('a'+gen%26)), "n1", badUUID)
		p.UID = "uid-" + string(rune('a'+gen%26)) + now.String()
		p.Owner = "default/Job/x"
		for {
			pl := h.Plan(Input{Pods: []Pod{p}, Unhealthy: failedOn("n1"), Now: now})
			if len(pl.Removals) == 1 {
				if gen > 1 {
					gaps = append(gaps, now.Sub(last))
				}
				last = now
				break
			}
			if len(pl.Left) != 1 || pl.Left[0].Kept || pl.Left[0].Until.IsZero() {
				t.Fatalf("at %s: neither removed nor backing off: %+v", now.Sub(t0), pl)
			}
			now = now.Add(10 * time.Second)
		}
		now = now.Add(10 * time.Second) // the replacement lands on a bad GPU again
	}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 4 * time.Minute}
	for i, w := range want {
		if i >= len(gaps) || gaps[i] != w {
			t.Fatalf("gaps between healings %v, want %v first", gaps, want)
		}
	}
	// Quiet for the reset period: the next failure heals at once.
	now = now.Add(9 * time.Minute)
	p := pod("later", "n1", badUUID)
	p.Owner = "default/Job/x"
	if pl := h.Plan(Input{Pods: []Pod{p}, Unhealthy: failedOn("n1"), Now: now}); len(pl.Removals) != 1 || pl.Removals[0].Attempt != 1 {
		t.Errorf("after a quiet spell: %+v, want an immediate first healing", pl.Removals)
	}
}

func TestBackoffReportedOnce(t *testing.T) {
	h := mustNew(t, Config{})
	p := pod("a", "n1", badUUID)
	p.Owner = "default/ReplicaSet/r"
	h.Plan(Input{Pods: []Pod{p}, Unhealthy: failedOn("n1"), Now: t0})
	q := pod("b", "n1", badUUID)
	q.Owner = p.Owner
	n := 0
	for i := range 5 {
		pl := h.Plan(Input{Pods: []Pod{q}, Unhealthy: failedOn("n1"), Now: t0.Add(time.Duration(i+1) * time.Second)})
		n += pl.NewBackoffs
		if len(pl.Removals) != 0 {
			t.Fatalf("removed while backing off: %v", keys(pl.Removals))
		}
	}
	if n != 1 {
		t.Errorf("NewBackoffs summed %d over one backoff, want 1", n)
	}
}

func TestMaxPerPlan(t *testing.T) {
	h := mustNew(t, Config{MaxPerPlan: 2})
	var pods []Pod
	for _, n := range []string{"a", "b", "c"} {
		pods = append(pods, pod(n, "n1", badUUID))
	}
	p := h.Plan(Input{Pods: pods, Unhealthy: failedOn("n1"), Now: t0})
	if len(p.Removals) != 2 || p.Deferred != 1 {
		t.Fatalf("removals %v deferred %d, want 2 and 1", keys(p.Removals), p.Deferred)
	}
	// A gang bigger than the bound goes whole, alone, when it comes first.
	g0, g1, g2 := pod("g-0", "n2", "GPU-9"), pod("g-1", "n1", badUUID), pod("g-2", "n3", "GPU-8")
	g0.Group, g1.Group, g2.Group = "default/zz", "default/zz", "default/zz"
	g0.Checkpointable, g1.Checkpointable, g2.Checkpointable = true, true, true
	p = h.Plan(Input{Pods: []Pod{pods[2], g0, g1, g2}, Unhealthy: failedOn("n1"), Now: t0.Add(time.Second)})
	if got := strings.Join(keys(p.Removals), ","); got != "default/g-0,default/g-1,default/g-2" || p.Deferred != 1 {
		t.Fatalf("removals %s deferred %d, want the whole gang, c deferred", got, p.Deferred)
	}
	p = h.Plan(Input{Pods: []Pod{pods[2]}, Unhealthy: failedOn("n1"), Now: t0.Add(2 * time.Second)})
	if got := keys(p.Removals); len(got) != 1 || got[0] != "default/c" {
		t.Fatalf("third plan removals %v, want default/c", got)
	}
}

func TestOwnersBounded(t *testing.T) {
	h := mustNew(t, Config{MaxOwners: 3})
	for i := range 10 {
		p := pod("p"+string(rune('a'+i)), "n1", badUUID)
		h.Plan(Input{Pods: []Pod{p}, Unhealthy: failedOn("n1"), Now: t0.Add(time.Duration(i) * time.Second)})
	}
	if h.Owners() != 3 {
		t.Errorf("owners %d, want 3", h.Owners())
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{Default: Keep}, {Default: "nope"}, {BackoffBase: 2 * time.Hour, BackoffMax: time.Hour},
		{BackoffMax: 48 * time.Hour}, {BackoffReset: time.Minute}, {MaxPerPlan: -1}, {MaxOwners: 1 << 30},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) = nil error", c)
		}
	}
	if _, err := New(Config{Default: Delete}); err != nil {
		t.Error(err)
	}
}

func TestParseAction(t *testing.T) {
	for in, want := range map[string]Action{"": Evict, "evict": Evict, " DELETE ": Delete, "keep": Keep} {
		got, err := ParseAction(in, Evict)
		if err != nil || got != want {
			t.Errorf("ParseAction(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	long := strings.Repeat("k", 200)
	_, err := ParseAction(long, Delete)
	if err == nil || strings.Contains(err.Error(), long) || !strings.Contains(err.Error(), "delete applies") {
		t.Errorf("ParseAction(long) error %v: want a bounded quote and the default named", err)
	}
}

// An elastic gang's member removed alone says the gang keeps running;
// once it is gone, the rest stay.
func TestElasticGangKeepsRunning(t *testing.T) {
	h := mustNew(t, Config{})
	var pods []Pod
	for i, n := range []string{"n1", "n2", "n2"} {
		p := pod("e-"+string(rune('0'+i)), n, "GPU-"+string(rune('0'+i)))
		p.Group = "default/e"
		pods = append(pods, p)
	}
	pods[0].Devices = append(pods[0].Devices, gpuDev("n1", badUUID))
	in := Input{Pods: pods, Unhealthy: failedOn("n1"), Now: t0, MinMember: map[string]int{"default/e": 2}}
	p := h.Plan(in)
	if got := keys(p.Removals); len(got) != 1 || got[0] != "default/e-0" {
		t.Fatalf("removals %v, want default/e-0 alone", got)
	}
	if got, want := p.Removals[0].Why(), "GPU GPU-bad on node n1 failed (Xid 79), reported by the telemetry stream; gang default/e keeps its 2 other members running"; got != want {
		t.Errorf("Why() = %q, want %q", got, want)
	}
	in.Pods, in.Now = pods[1:], t0.Add(time.Second)
	if p := h.Plan(in); len(p.Removals) != 0 {
		t.Errorf("after the failed member went: removals %v, want none", keys(p.Removals))
	}
}

// The healer remembers where a healed gang ran, for HomeTTL, so that
// its re-created members go back to that domain.
func TestHomes(t *testing.T) {
	h := mustNew(t, Config{HomeTTL: 10 * time.Minute, MaxOwners: 2})
	a, b, c := pod("a", "n1", badUUID), pod("b", "n2", "GPU-2"), pod("c", "n1", badUUID)
	a.Group, b.Group = "default/g", "default/g"
	h.Plan(Input{Pods: []Pod{a, b, c}, Unhealthy: failedOn("n1"), Now: t0})
	if got := h.Homes(t0.Add(time.Minute)); len(got) != 1 || strings.Join(got["default/g"], ",") != "n1,n2" {
		t.Errorf("homes %v, want default/g on n1,n2 (lone pods not remembered)", got)
	}
	if got := h.Homes(t0.Add(10 * time.Minute)); len(got) != 0 {
		t.Errorf("homes after the TTL %v, want none", got)
	}
	for i, g := range []string{"x", "y", "z"} {
		p := pod("m-"+g, "n1", badUUID)
		p.Group = "default/" + g
		h.Plan(Input{Pods: []Pod{p}, Unhealthy: failedOn("n1"), Now: t0.Add(time.Duration(i+1) * time.Second)})
	}
	if got := h.Homes(t0.Add(5 * time.Second)); len(got) != 2 || got["default/y"] == nil || got["default/z"] == nil {
		t.Errorf("homes %v, want the 2 most recent (MaxOwners)", got)
	}
}

// Why says what reported the failure: the stream or a device taint.
func TestRemovalWhyNamesReporter(t *testing.T) {
	h := mustNew(t, Config{})
	a := Pod{Key: "default/a", UID: "a", Node: "n9", Devices: []Device{{Node: "n9", Name: "gpu-1", UUID: "GPU-1", Taint: "Xid 48"}}}
	b := pod("b", "n1", badUUID)
	p := h.Plan(Input{Pods: []Pod{a, b}, Unhealthy: failedOn("n1"), Now: t0})
	got := map[string]string{}
	for _, r := range p.Removals {
		got[r.Pod.Key] = r.Why()
	}
	want := map[string]string{
		"default/a": "GPU GPU-1 on node n9 failed (Xid 48), reported by a NoExecute device taint",
		"default/b": "GPU GPU-bad on node n1 failed (Xid 79), reported by the telemetry stream",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: Why() = %q, want %q", k, got[k], w)
		}
	}
}
