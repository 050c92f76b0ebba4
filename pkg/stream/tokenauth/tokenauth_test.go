package tokenauth

import (
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpud/gpud/pkg/stream"
)

// token is a JWT-shaped token whose payload carries exp (the fake API
// server below decides what it means, by the whole token).
func token(name string, exp time.Time) string {
	p := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"exp":%d,"sub":%q}`, exp.Unix(), name))
	return "eyJhbGciOiJSUzI1NiJ9." + p + ".c2ln"
}

// fakeAPI answers TokenReviews from statuses, by token, and counts them.
type fakeAPI struct {
	client   *fake.Clientset
	statuses map[string]authnv1.TokenReviewStatus
	reviews  int
	fail     error
}

func newFakeAPI(objs ...runtime.Object) *fakeAPI {
	f := &fakeAPI{client: fake.NewClientset(objs...), statuses: map[string]authnv1.TokenReviewStatus{}}
	f.client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.reviews++
		if f.fail != nil {
			return true, nil, f.fail
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		st, ok := f.statuses[tr.Spec.Token]
		if !ok || len(tr.Spec.Audiences) != 1 || tr.Spec.Audiences[0] != DefaultAudience {
			st = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		tr.Status = st
		return true, tr, nil
	})
	return f
}

// agent is the status of a valid token of the agents' ServiceAccount,
// bound to pod on node (no node claim when node is empty).
func agent(pod, uid, node string) authnv1.TokenReviewStatus {
	extra := map[string]authnv1.ExtraValue{extraPodName: {pod}, extraPodUID: {uid}}
	if node != "" {
		extra[extraNodeName] = authnv1.ExtraValue{node}
	}
	return authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{DefaultAudience},
		User: authnv1.UserInfo{Username: "system:serviceaccount:gpud:gpud", Extra: extra}}
}

func newAuth(t *testing.T, f *fakeAPI, now *time.Time, mutate ...func(*Config)) *Authenticator {
	t.Helper()
	cfg := Config{Client: f.client, Now: func() time.Time { return *now }}
	for _, m := range mutate {
		m(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func reason(err error) string {
	var ae *stream.AuthError
	if errors.As(err, &ae) {
		return ae.Reason
	}
	if err != nil {
		return "not an AuthError: " + err.Error()
	}
	return ""
}

func TestAuthenticate(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(10 * time.Minute)
	pod := func(name, uid, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "gpud", Name: name, UID: types.UID("uid-" + uid)}, Spec: corev1.PodSpec{NodeName: node}}
	}
	tests := []struct {
		name   string
		status authnv1.TokenReviewStatus
		node   string
		want   string // reason; "" accepted
	}{
		{name: "own node (node claim)", status: agent("gpud-a", "uid-a", "node-a"), node: "node-a"},
		{name: "another node (node claim)", status: agent("gpud-a", "uid-a", "node-a"), node: "node-b", want: stream.ReasonTokenNodeMismatch},
		{name: "own node (pod lookup, before 1.32)", status: agent("gpud-a", "uid-a", ""), node: "node-a"},
		{name: "another node (pod lookup)", status: agent("gpud-a", "uid-a", ""), node: "node-b", want: stream.ReasonTokenNodeMismatch},
		{name: "pod replaced (UID differs)", status: agent("gpud-a", "uid-old", ""), node: "node-a", want: stream.ReasonTokenInvalid},
		{name: "pod gone", status: agent("gpud-gone", "uid-x", ""), node: "node-a", want: stream.ReasonTokenInvalid},
		{name: "pod not scheduled", status: agent("gpud-pending", "uid-p", ""), node: "node-a", want: stream.ReasonTokenNodeMismatch},
		{name: "not authenticated (expired, forged)", status: authnv1.TokenReviewStatus{Error: "token has expired"}, node: "node-a", want: stream.ReasonTokenInvalid},
		{name: "wrong audience", status: func() authnv1.TokenReviewStatus {
			s := agent("gpud-a", "uid-a", "node-a")
			s.Audiences = []string{"https://kubernetes.default.svc"}
			return s
		}(), node: "node-a", want: stream.ReasonTokenInvalid},
		{name: "another ServiceAccount (a tenant's pod on the node)", status: func() authnv1.TokenReviewStatus {
			s := agent("job-1", "uid-j", "node-a")
			s.User.Username = "system:serviceaccount:team-a:default"
			return s
		}(), node: "node-a", want: stream.ReasonTokenServiceAccount},
		{name: "not bound to a pod (legacy Secret token)", status: func() authnv1.TokenReviewStatus {
			s := agent("gpud-a", "uid-a", "node-a")
			s.User.Extra = nil
			return s
		}(), node: "node-a", want: stream.ReasonTokenServiceAccount},
		{name: "a user, not a ServiceAccount", status: authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{DefaultAudience},
			User: authnv1.UserInfo{Username: "system:node:node-a"}}, node: "node-a", want: stream.ReasonTokenServiceAccount},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(pod("gpud-a", "a", "node-a"), pod("gpud-pending", "p", ""))
			tok := token(tc.name, exp)
			f.statuses[tok] = tc.status
			a := newAuth(t, f, &now)
			for i := range 3 { // the first reviews, the others hit the cache
				if got := reason(a.Authenticate(t.Context(), tok, tc.node)); got != tc.want {
					t.Fatalf("call %d: reason %q, want %q", i, got, tc.want)
				}
			}
			if f.reviews != 1 {
				t.Errorf("%d TokenReviews for one token, want 1 (cached)", f.reviews)
			}
		})
	}
}

func TestAuthenticateAPIErrorIsTemporaryAndNotCached(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := newFakeAPI()
	tok := token("a", now.Add(time.Hour))
	f.statuses[tok] = agent("gpud-a", "uid-a", "node-a")
	f.fail = errors.New("connection refused")
	a := newAuth(t, f, &now)
	err := a.Authenticate(t.Context(), tok, "node-a")
	var ae *stream.AuthError
	if !errors.As(err, &ae) || !ae.Temporary || ae.Reason != stream.ReasonTokenReviewFailed {
		t.Fatalf("err = %v, want a temporary %s", err, stream.ReasonTokenReviewFailed)
	}
	f.fail = nil
	if err := a.Authenticate(t.Context(), tok, "node-a"); err != nil {
		t.Fatalf("after the API came back: %v", err)
	}
	if f.reviews != 2 {
		t.Errorf("%d reviews, want 2 (the failure is not cached)", f.reviews)
	}
}

func TestCacheExpiresWithTTLAndToken(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := newFakeAPI()
	long, short := token("long", now.Add(time.Hour)), token("short", now.Add(20*time.Second))
	f.statuses[long] = agent("gpud-a", "uid-a", "node-a")
	f.statuses[short] = agent("gpud-a", "uid-a", "node-a")
	a := newAuth(t, f, &now)
	for _, tok := range []string{long, short} {
		if err := a.Authenticate(t.Context(), tok, "node-a"); err != nil {
			t.Fatal(err)
		}
	}
	// 30s on: the short token expired (the API server now says so), the
	// long one is still cached.
	now = now.Add(30 * time.Second)
	f.statuses[short] = authnv1.TokenReviewStatus{Error: "token has expired"}
	if got := reason(a.Authenticate(t.Context(), short, "node-a")); got != stream.ReasonTokenInvalid {
		t.Errorf("expired token: reason %q, want %s", got, stream.ReasonTokenInvalid)
	}
	if err := a.Authenticate(t.Context(), long, "node-a"); err != nil || f.reviews != 3 {
		t.Errorf("long token: %v after %d reviews, want cached (3)", err, f.reviews)
	}
	// Past the TTL the long token is reviewed again.
	now = now.Add(DefaultCacheTTL)
	if err := a.Authenticate(t.Context(), long, "node-a"); err != nil || f.reviews != 4 {
		t.Errorf("long token past the TTL: %v after %d reviews, want 4", err, f.reviews)
	}
}

func TestCacheBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := newFakeAPI()
	a := newAuth(t, f, &now, func(c *Config) { c.MaxCached = 64 })
	for i := range 1000 {
		tok := token(fmt.Sprint(i), now.Add(time.Hour))
		f.statuses[tok] = agent(fmt.Sprintf("gpud-%d", i), "uid", fmt.Sprintf("node-%d", i))
		if err := a.Authenticate(t.Context(), tok, fmt.Sprintf("node-%d", i)); err != nil {
			t.Fatal(err)
		}
		if n := a.Cached(); n > 64 {
			t.Fatalf("%d cached reviews after %d tokens, want at most 64", n, i+1)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	f := newFakeAPI()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no client", Config{}},
		{"service account without namespace", Config{Client: f.client, ServiceAccounts: []string{"gpud"}}},
		{"bad namespace", Config{Client: f.client, ServiceAccounts: []string{"Bad_NS/gpud"}}},
		{"audience with a comma", Config{Client: f.client, Audience: "a,b"}},
		{"negative TTL", Config{Client: f.client, CacheTTL: -time.Second}},
		{"cache too large", Config{Client: f.client, MaxCached: 10_000_000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); !errors.Is(err, ErrConfig) {
				t.Fatalf("New() = %v, want ErrConfig", err)
			}
		})
	}
	if _, err := New(Config{Client: f.client}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// BenchmarkAuthenticate: a reconnect (cached review) and a new token (a
// review against the fake API server, whose cost is not the real one's).
func BenchmarkAuthenticate(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	f := newFakeAPI()
	a, err := New(Config{Client: f.client, Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	tok := token("cached", now.Add(time.Hour))
	f.statuses[tok] = agent("gpud-a", "uid-a", "node-a")
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := a.Authenticate(b.Context(), tok, "node-a"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
