package scheduler

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

func TestConfigValidate(t *testing.T) {
	client := fake.NewClientset()
	ok := Config{Client: client, Decider: placeAll{}}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string // "" valid
	}{
		{name: "defaults"},
		{name: "no client", mutate: func(c *Config) { c.Client = nil }, want: "Client is required"},
		{name: "no decider", mutate: func(c *Config) { c.Decider = nil }, want: "Decider is required"},
		{name: "bad policy", mutate: func(c *Config) { c.Policy = "nope" }, want: `policy "nope"`},
		{name: "bad name", mutate: func(c *Config) { c.SchedulerName = "Not_A_Name" }, want: "scheduler name"},
		{name: "too many workers", mutate: func(c *Config) { c.Workers = MaxWorkers + 1 }, want: "workers"},
		{name: "lease without identity", mutate: func(c *Config) { c.LeaderElection = &LeaderElection{Namespace: "kube-system"} }, want: "identity is required"},
		{name: "lease shorter than renew", mutate: func(c *Config) {
			c.LeaderElection = &LeaderElection{Namespace: "ns", Identity: "a", LeaseDuration: time.Second, RenewDeadline: 2 * time.Second}
		}, want: "greater than the renew deadline"},
		{name: "lease ok", mutate: func(c *Config) {
			c.LeaderElection = &LeaderElection{Namespace: "ns", Identity: "a", LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: time.Second / 2}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			if tc.mutate != nil {
				tc.mutate(&c)
			}
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				if _, err := New(c); err != nil {
					t.Fatalf("New() = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig) {
				t.Fatalf("Validate() = %v, want %q matching ErrConfig", err, tc.want)
			}
		})
	}
}

func TestResolveClaims(t *testing.T) {
	owned := wholeClaim("ns", "gen-1", "gpu.gpud.io")
	owned.OwnerReferences = []metav1.OwnerReference{{UID: "pod-p", Name: "p", Kind: "Pod", APIVersion: "v1"}}
	foreign := wholeClaim("ns", "gen-2", "gpu.gpud.io")
	byName := map[string]*resourceapi.ResourceClaim{"ns/by-name": wholeClaim("ns", "by-name", "gpu.gpud.io"), "ns/gen-1": owned, "ns/gen-2": foreign}
	tmpl := func(pod *corev1.Pod, podClaim, claim string, status bool) {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: podClaim, ResourceClaimTemplateName: ptr.To("t")})
		if status {
			var name *string
			if claim != "" {
				name = ptr.To(claim)
			}
			pod.Status.ResourceClaimStatuses = append(pod.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: podClaim, ResourceClaimName: name})
		}
	}
	for _, tc := range []struct {
		name   string
		pod    func() *corev1.Pod
		claims []string // names, "" for a missing one
		why    string
	}{
		{name: "by name", pod: func() *corev1.Pod { return claimPod("ns", "p", t0, "by-name") }, claims: []string{"by-name"}},
		{name: "by name missing", pod: func() *corev1.Pod { return claimPod("ns", "p", t0, "gone") }, claims: []string{""},
			why: "waiting for ResourceClaim ns/gone"},
		{name: "template resolved", pod: func() *corev1.Pod {
			p := claimPod("ns", "p", t0, "by-name")
			tmpl(p, "g", "gen-1", true)
			return p
		}, claims: []string{"by-name", "gen-1"}},
		{name: "template not created yet", pod: func() *corev1.Pod {
			p := claimPod("ns", "p", t0)
			tmpl(p, "g", "", false)
			return p
		}, claims: []string{""}, why: "resourceclaim controller"},
		{name: "template needs no claim", pod: func() *corev1.Pod {
			p := claimPod("ns", "p", t0)
			tmpl(p, "g", "", true)
			return p
		}},
		{name: "template claim of another pod", pod: func() *corev1.Pod {
			p := claimPod("ns", "p", t0)
			tmpl(p, "g", "gen-2", true)
			return p
		}, claims: []string{""}, why: "not owned by the pod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := resolveClaims(tc.pod(), byName)
			if len(got) != len(tc.claims) {
				t.Fatalf("claims = %d, want %d", len(got), len(tc.claims))
			}
			for i, c := range got {
				name := ""
				if c != nil {
					name = c.Name
				}
				if name != tc.claims[i] {
					t.Errorf("claim %d = %q, want %q", i, name, tc.claims[i])
				}
			}
			if (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
				t.Errorf("why = %q, want %q", why, tc.why)
			}
		})
	}
}

func TestSnapshotPendingAndBound(t *testing.T) {
	ts := newTestScheduler(t, placeAll{})
	mine := claimPod("ns", "mine", t0.Add(2*time.Second), "c1")
	older := claimPod("ns", "older", t0, "c2")
	missing := claimPod("ns", "missing", t0.Add(-claimGrace), "nope")
	// Created a moment ago: its claim may still be on its way.
	fresh := claimPod("ns", "fresh", t0.Add(-time.Second), "on-its-way")
	other := claimPod("ns", "other", t0)
	other.Spec.SchedulerName = "default-scheduler"
	deleting := claimPod("ns", "deleting", t0)
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	bound := claimPod("ns", "bound", t0, "c3")
	bound.Spec.NodeName = "n1"
	done := claimPod("ns", "done", t0)
	done.Spec.NodeName = "n1"
	done.Status.Phase = corev1.PodSucceeded
	assumed := claimPod("ns", "assumed", t0)
	ts.assumed.bound(assumed.UID, "n2")

	sn := ts.snapshotOf(inputs{
		pods:   []*corev1.Pod{mine, older, missing, fresh, other, deleting, bound, done, assumed},
		claims: []*resourceapi.ResourceClaim{wholeClaim("ns", "c1", "x"), wholeClaim("ns", "c2", "x"), wholeClaim("ns", "c3", "x")},
	})
	var pending, boundKeys []string
	for _, p := range sn.Pending {
		pending = append(pending, p.Key())
	}
	for _, p := range sn.Bound {
		boundKeys = append(boundKeys, p.Key()+"@"+p.Pod.Spec.NodeName)
	}
	if strings.Join(pending, ",") != "ns/older,ns/mine" {
		t.Errorf("pending = %v, want older then mine", pending)
	}
	if strings.Join(boundKeys, ",") != "ns/bound@n1,ns/assumed@n2" {
		t.Errorf("bound = %v", boundKeys)
	}
	if len(sn.Bound[0].Claims) != 1 || sn.Bound[0].Claims[0].Name != "c3" {
		t.Errorf("bound pod claims = %v", sn.Bound[0].Claims)
	}
	if len(sn.missing) != 1 || sn.missing[0].Pod.Key() != "ns/missing" || sn.missing[0].Code != CodeClaimMissing {
		t.Errorf("missing = %+v", sn.missing)
	}
	if assumed.Spec.NodeName != "" {
		t.Error("the informer's pod object was modified")
	}

	ts.snap.maxPending = 1
	sn = ts.snapshotOf(inputs{pods: []*corev1.Pod{mine, older},
		claims: []*resourceapi.ResourceClaim{wholeClaim("ns", "c1", "x"), wholeClaim("ns", "c2", "x")}})
	if len(sn.Pending) != 1 || sn.Pending[0].Key() != "ns/older" || sn.deferred != 1 {
		t.Errorf("capped: pending %d (first %s), deferred %d; want the oldest and 1 deferred", len(sn.Pending), sn.Pending[0].Key(), sn.deferred)
	}
}

func TestNewPodAnnotations(t *testing.T) {
	pod := claimPod("ns", "p", t0)
	pod.Labels = map[string]string{plan.QueueLabel: "team-a", plan.PodGroupLabel: "g"}
	pod.Annotations = map[string]string{plan.CheckpointableAnnotation: "true", plan.RuntimeEstimateAnnotation: "90m"}
	pod.Spec.Priority = ptr.To(int32(7))
	p := newPod(pod, nil)
	if p.Queue != "team-a" || p.Group != "ns/g" || !p.Checkpointable || p.RuntimeEstimate != 90*time.Minute || p.Priority != 7 {
		t.Errorf("newPod = %+v", p)
	}
	for in, want := range map[string]time.Duration{"5400": 90 * time.Minute, "-5": 0, "x": 0, "1e9": 0, "9999999h": 0, "": 0} {
		got, err := runtimeEstimate(in)
		if got != want || (err != nil) != (want == 0 && in != "") {
			t.Errorf("runtimeEstimate(%q) = %v, %v; want %v (an error for a malformed value)", in, got, err, want)
		}
	}
}

func TestAssumeCacheMerge(t *testing.T) {
	a := newAssumeCache()
	informer := wholeClaim("ns", "c", "x") // RV 10
	written := informer.DeepCopy()
	written.ResourceVersion = "12"
	written.Status.Allocation = &resourceapi.AllocationResult{}
	a.claim(written, t0)

	got := a.mergeClaims([]*resourceapi.ResourceClaim{informer}, t0)
	if len(got) != 1 || got[0] != written {
		t.Fatalf("lagging informer: got %v, want the written claim", got)
	}
	// An older write recorded later does not replace the newer one.
	stale := informer.DeepCopy()
	stale.ResourceVersion = "11"
	a.claim(stale, t0)
	if got := a.mergeClaims([]*resourceapi.ResourceClaim{informer}, t0); got[0] != written {
		t.Fatalf("stale write replaced the newer one")
	}
	caught := written.DeepCopy()
	if got := a.mergeClaims([]*resourceapi.ResourceClaim{caught}, t0); got[0] != caught || len(a.claims) != 0 {
		t.Fatalf("caught-up informer: got %v, %d entries left", got, len(a.claims))
	}

	// A written claim the informer has not seen at all counts for a while.
	fresh := wholeClaim("ns", "fresh", "x")
	a.claim(fresh, t0)
	if got := a.mergeClaims(nil, t0.Add(time.Second)); len(got) != 1 || got[0] != fresh {
		t.Fatalf("absent claim within grace: %v", got)
	}
	if got := a.mergeClaims(nil, t0.Add(absentGrace+time.Second)); len(got) != 0 || len(a.claims) != 0 {
		t.Fatalf("absent claim after grace: %v", got)
	}
}
