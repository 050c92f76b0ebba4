// Package tokenauth proves the node of a telemetry stream with the agent
// pod's projected ServiceAccount token: the scheduler asks the API server
// (TokenReview, with the stream's audience) who holds the token, requires
// the agents' ServiceAccount and a token bound to a pod, and takes the
// pod's node from the token (authentication.kubernetes.io/node-name, set
// since Kubernetes 1.32) or, without it, from the pod itself (a GET,
// whose UID must match the token's). Reviews are cached per token for a
// bounded time and number of tokens, so agents reconnecting all at once
// (a leader change) cost one review each, and a reconnect none.
//
// It implements [stream.Authenticator]; it is the one part of the stream
// that imports client-go.
package tokenauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/pkg/stream"
	"github.com/gpud/gpud/pkg/stream/tokenauth/satoken"
)

// Defaults of [Config].
const (
	// DefaultAudience is the audience of the agents' projected token.
	DefaultAudience = "gpud-telemetry"
	// DefaultServiceAccount is the agents' ServiceAccount (the
	// DaemonSet's), namespace/name.
	DefaultServiceAccount = "gpud/gpud"
	DefaultCacheTTL       = time.Minute
	DefaultMaxCached      = 10000
)

// The user extra keys of a pod-bound ServiceAccount token.
const (
	extraPodName  = "authentication.kubernetes.io/pod-name"
	extraPodUID   = "authentication.kubernetes.io/pod-uid"
	extraNodeName = "authentication.kubernetes.io/node-name"
)

// ErrConfig is an invalid [Config].
var ErrConfig = errors.New("tokenauth: invalid configuration")

// Config configures an [Authenticator]. Zero values take the documented
// defaults.
type Config struct {
	// Client creates TokenReviews and, for tokens without a node claim,
	// gets Pods; required.
	Client kubernetes.Interface
	// Audience the token must be issued for; default [DefaultAudience].
	Audience string
	// ServiceAccounts are the agents' ServiceAccounts, namespace/name;
	// default [DefaultServiceAccount].
	ServiceAccounts []string
	// CacheTTL bounds how long a review is reused (never past the
	// token's own expiry); default [DefaultCacheTTL]. A deleted pod's
	// token may be accepted for this long after.
	CacheTTL time.Duration
	// MaxCached bounds the cached reviews; default [DefaultMaxCached].
	MaxCached int
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Audience == "" {
		c.Audience = DefaultAudience
	}
	if len(c.ServiceAccounts) == 0 {
		c.ServiceAccounts = []string{DefaultServiceAccount}
	}
	if c.CacheTTL == 0 {
		c.CacheTTL = DefaultCacheTTL
	}
	if c.MaxCached == 0 {
		c.MaxCached = DefaultMaxCached
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate checks the config after defaults, all but Client (which
// [New] requires): the flags' values.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if len(c.Audience) > 253 || strings.ContainsAny(c.Audience, " \t\r\n,") {
		errs = append(errs, fmt.Errorf("audience %q: want up to 253 characters without spaces or commas: %w", c.Audience, ErrConfig))
	}
	for _, sa := range c.ServiceAccounts {
		if _, err := ParseServiceAccount(sa); err != nil {
			errs = append(errs, err)
		}
	}
	if c.CacheTTL < 0 || c.CacheTTL > time.Hour {
		errs = append(errs, fmt.Errorf("cache TTL %s: want 0 to 1h: %w", c.CacheTTL, ErrConfig))
	}
	if c.MaxCached < 1 || c.MaxCached > 1000000 {
		errs = append(errs, fmt.Errorf("max cached %d: want 1 to 1000000: %w", c.MaxCached, ErrConfig))
	}
	return errors.Join(errs...)
}

// ParseServiceAccount checks a "namespace/name" ServiceAccount and
// returns its username, system:serviceaccount:namespace:name.
func ParseServiceAccount(s string) (string, error) {
	u, err := satoken.Username(s)
	if err != nil {
		return "", fmt.Errorf("%w: %w", err, ErrConfig)
	}
	return u, nil
}

// Authenticator is the TokenReview [stream.Authenticator]. It is safe for
// concurrent use.
type Authenticator struct {
	cfg     Config
	users   []string
	reviews *prometheus.CounterVec

	mu    sync.Mutex
	cache map[[sha256.Size]byte]entry
}

var _ stream.Authenticator = (*Authenticator)(nil)

// entry is a cached review: the token's node, or its refusal.
type entry struct {
	node    string
	pod     string // namespace/name
	refused *stream.AuthError
	expires time.Time
}

// New checks cfg and returns an authenticator with an empty cache.
func New(cfg Config) (*Authenticator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Client == nil {
		return nil, fmt.Errorf("no API client: %w", ErrConfig)
	}
	cfg = cfg.withDefaults()
	a := &Authenticator{cfg: cfg, cache: map[[sha256.Size]byte]entry{},
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpud_scheduler_telemetry_token_reviews_total",
			Help: "TokenReviews the scheduler sent for agents' tokens (cache misses), by result (ok, refused, error)."}, []string{"result"})}
	for _, sa := range cfg.ServiceAccounts {
		u, _ := ParseServiceAccount(sa) // validated
		a.users = append(a.users, u)
	}
	return a, nil
}

// Collectors are the authenticator's metrics.
func (a *Authenticator) Collectors() []prometheus.Collector { return []prometheus.Collector{a.reviews} }

// Authenticate proves that token is held by a pod of the agents'
// ServiceAccount on node, from the cache or a TokenReview.
func (a *Authenticator) Authenticate(ctx context.Context, token, node string) error {
	key := sha256.Sum256([]byte(token))
	now := a.cfg.Now()
	a.mu.Lock()
	e, ok := a.cache[key]
	if ok && !now.Before(e.expires) {
		delete(a.cache, key)
		ok = false
	}
	a.mu.Unlock()
	if !ok {
		var err error
		if e, err = a.review(ctx, token, now); err != nil {
			a.reviews.WithLabelValues("error").Inc()
			return err // temporary: not cached
		}
		a.reviews.WithLabelValues(map[bool]string{true: "ok", false: "refused"}[e.refused == nil]).Inc()
		a.store(key, e, now)
	}
	if e.refused != nil {
		return e.refused
	}
	if e.node != node {
		return &stream.AuthError{Reason: stream.ReasonTokenNodeMismatch,
			Err: fmt.Errorf("the token's pod %s runs on node %q, not %q", e.pod, e.node, node)}
	}
	return nil
}

// review asks the API server about token. A refusal comes back in the
// entry (cached); an error is temporary.
func (a *Authenticator) review(ctx context.Context, token string, now time.Time) (entry, error) {
	e := entry{expires: now.Add(a.cfg.CacheTTL)}
	refuse := func(reason string, format string, args ...any) (entry, error) {
		e.refused = &stream.AuthError{Reason: reason, Err: fmt.Errorf(format, args...)}
		return e, nil
	}
	tr, err := a.cfg.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{a.cfg.Audience}}}, metav1.CreateOptions{})
	if err != nil {
		return e, &stream.AuthError{Reason: stream.ReasonTokenReviewFailed, Temporary: true, Err: fmt.Errorf("token review: %w", err)}
	}
	st := tr.Status
	if !st.Authenticated {
		return refuse(stream.ReasonTokenInvalid, "the API server does not authenticate the token (audience %s): %s", a.cfg.Audience, trunc(st.Error))
	}
	if !slices.Contains(st.Audiences, a.cfg.Audience) {
		return refuse(stream.ReasonTokenInvalid, "the token is for audiences %v, not %s", st.Audiences, a.cfg.Audience)
	}
	if !slices.Contains(a.users, st.User.Username) {
		return refuse(stream.ReasonTokenServiceAccount, "the token is %s's, not the agents' (%s)", trunc(st.User.Username), strings.Join(a.cfg.ServiceAccounts, ", "))
	}
	podName, podUID := one(st.User.Extra[extraPodName]), one(st.User.Extra[extraPodUID])
	if podName == "" || podUID == "" {
		return refuse(stream.ReasonTokenServiceAccount, "the token of %s is not bound to a pod: mount a projected token", st.User.Username)
	}
	ns := satoken.Namespace(st.User.Username)
	e.pod = ns + "/" + podName
	if exp, ok := satoken.Expiry(token); ok && exp.Before(e.expires) {
		e.expires = exp // reviewed: its claims are the API server's
	}
	if e.node = one(st.User.Extra[extraNodeName]); e.node != "" {
		// The API server checked that the pod exists with this UID; a
		// pod's node never changes.
		return e, nil
	}
	pod, err := a.cfg.Client.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return refuse(stream.ReasonTokenInvalid, "the token's pod %s no longer exists", e.pod)
	case err != nil:
		return e, &stream.AuthError{Reason: stream.ReasonTokenReviewFailed, Temporary: true, Err: fmt.Errorf("get pod %s: %w", e.pod, err)}
	case string(pod.UID) != podUID:
		return refuse(stream.ReasonTokenInvalid, "the token's pod %s was replaced (UID %s, token's %s)", e.pod, pod.UID, trunc(podUID))
	case pod.Spec.NodeName == "":
		return refuse(stream.ReasonTokenNodeMismatch, "the token's pod %s is not on a node", e.pod)
	}
	e.node = pod.Spec.NodeName
	return e, nil
}

// store caches e, making room when the cache is full: expired entries
// first, else an eighth of the entries, whichever (map order).
func (a *Authenticator) store(key [sha256.Size]byte, e entry, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= a.cfg.MaxCached {
		for k, v := range a.cache {
			if !now.Before(v.expires) {
				delete(a.cache, k)
			}
		}
		for k := range a.cache {
			if len(a.cache) < a.cfg.MaxCached-a.cfg.MaxCached/8 {
				break
			}
			delete(a.cache, k)
		}
	}
	a.cache[key] = e
}

// Cached is the number of cached reviews.
func (a *Authenticator) Cached() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.cache)
}

func one(v authnv1.ExtraValue) string {
	if len(v) != 1 {
		return ""
	}
	return v[0]
}

func trunc(s string) string {
	if len(s) > 128 {
		return s[:128] + "..."
	}
	return s
}
