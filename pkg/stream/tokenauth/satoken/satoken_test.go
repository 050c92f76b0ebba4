package satoken

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// jwt is an unsigned-looking JWT whose payload is claims.
func jwt(claims string) string {
	return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".c2ln"
}

func TestUsername(t *testing.T) {
	if u, err := Username("gpud/gpud-agent"); err != nil || u != "system:serviceaccount:gpud:gpud-agent" {
		t.Errorf("Username(gpud/gpud-agent) = %q, %v", u, err)
	}
	for _, bad := range []string{"gpud", "/x", "x/", "a/b/c", "Gpud/x", strings.Repeat("n", 64) + "/x"} {
		if u, err := Username(bad); !errors.Is(err, ErrServiceAccount) {
			t.Errorf("Username(%q) = %q, %v; want ErrServiceAccount", bad, u, err)
		}
	}
	if _, err := Username(strings.Repeat("\x00", 1000)); err == nil || len(err.Error()) > 128*4+60 {
		t.Errorf("a 1000-byte binary reference: error %v, want the reference cut to 128 bytes", err)
	}
}

func TestNamespace(t *testing.T) {
	for in, want := range map[string]string{
		"system:serviceaccount:gpud:agent": "gpud",
		"system:serviceaccount:gpud":       "gpud",
		"alice":                            "",
		"system:node:n1":                   "",
	} {
		if got := Namespace(in); got != want {
			t.Errorf("Namespace(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExpiry(t *testing.T) {
	if exp, ok := Expiry(jwt(`{"exp":1800000000,"sub":"x"}`)); !ok || !exp.Equal(time.Unix(1_800_000_000, 0)) {
		t.Errorf("Expiry = %v, %v; want 1800000000", exp, ok)
	}
	for _, tok := range []string{"a.b.c", "..", jwt(`{"exp":-1}`), jwt(`{"sub":"x"}`), jwt(`{"exp":"soon"}`), "x.y", jwt(`{"exp":1}`) + ".extra"} {
		if exp, ok := Expiry(tok); ok {
			t.Errorf("Expiry(%q) = %v, want none", tok, exp)
		}
	}
}

// FuzzExpiry: any token parses to a positive expiry or none, never a
// panic.
func FuzzExpiry(f *testing.F) {
	f.Add(jwt(fmt.Sprintf(`{"exp":%d,"sub":"x"}`, 1_800_000_000)))
	f.Add("a.b.c")
	f.Add("..")
	f.Add("eyJ.eyJleHAiOi0xfQ.x")
	f.Fuzz(func(t *testing.T, tok string) {
		if exp, ok := Expiry(tok); ok && exp.Unix() <= 0 {
			t.Fatalf("Expiry(%q) = %v", tok, exp)
		}
	})
}

// FuzzUsername: an accepted reference makes a username of exactly the
// form the API server gives its tokens, whose namespace reads back.
func FuzzUsername(f *testing.F) {
	for _, s := range []string{"gpud/gpud", "gpud", "/x", "a/b/c", "ns/name.with.dots"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := Username(s)
		if err != nil {
			return
		}
		ns, name, _ := strings.Cut(s, "/")
		if u != "system:serviceaccount:"+ns+":"+name || Namespace(u) != ns {
			t.Fatalf("Username(%q) = %q", s, u)
		}
	})
}
