// Package satoken holds what gpud reads of a Kubernetes ServiceAccount
// token without the API server: the username a ServiceAccount's tokens
// authenticate as, and a JWT's unverified expiry (which only shortens how
// long a TokenReview answer is cached; the review itself is the API
// server's).
package satoken

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// UserPrefix starts the username of every ServiceAccount token.
const UserPrefix = "system:serviceaccount:"

// ErrServiceAccount is a ServiceAccount reference that is not
// "namespace/name".
var ErrServiceAccount = errors.New("want namespace/name")

// Username checks a "namespace/name" ServiceAccount reference and returns
// the username its tokens authenticate as, system:serviceaccount:ns:name.
func Username(ref string) (string, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return "", fmt.Errorf("service account %s: %w", quote(ref), ErrServiceAccount)
	}
	return UserPrefix + ns + ":" + name, nil
}

// Namespace is the namespace of a ServiceAccount username, or "" when the
// username is not one.
func Namespace(username string) string {
	rest, ok := strings.CutPrefix(username, UserPrefix)
	if !ok {
		return ""
	}
	ns, _, _ := strings.Cut(rest, ":")
	return ns
}

// Expiry reads a JWT's exp claim without checking its signature; false
// when the token is not a JWT or has no positive exp.
func Expiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil || *claims.Exp <= 0 {
		return time.Time{}, false
	}
	return time.Unix(*claims.Exp, 0), true
}

// quote quotes s for a message, cut to 128 bytes.
func quote(s string) string {
	if len(s) > 128 {
		return fmt.Sprintf("%q...", s[:128])
	}
	return fmt.Sprintf("%q", s)
}
