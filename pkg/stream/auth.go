package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// Node identity on the stream. Mutual TLS proves that a connection comes
// from a gpud agent (its client certificate is signed by the CA), not
// which node it runs on: every agent may hold the same certificate. Each
// agent proves its node with a bearer token only its own pod holds (its
// projected ServiceAccount token, bound to the pod), sent as gRPC metadata
// on every stream and checked by the server's [Authenticator] against the
// node of the Hello.

// MaxTokenBytes bounds a bearer token, read from the agent's file or
// received by the server.
const MaxTokenBytes = 16 << 10

// Reasons of gpud_scheduler_telemetry_refused_total for an identity that
// is not proven. An [Authenticator] refuses with an [AuthError] carrying
// one of the token reasons.
const (
	// ReasonTokenMissing: the stream carries no (well-formed) bearer token.
	ReasonTokenMissing = "token-missing"
	// ReasonTokenInvalid: the API server does not authenticate the token
	// (expired, wrong audience, its pod gone, forged).
	ReasonTokenInvalid = "token-invalid"
	// ReasonTokenServiceAccount: the token is valid but not of the
	// agents' ServiceAccount, or not bound to a pod.
	ReasonTokenServiceAccount = "token-wrong-service-account"
	// ReasonTokenNodeMismatch: the token's pod runs on another node than
	// the one the Hello reports for.
	ReasonTokenNodeMismatch = "token-node-mismatch"
	// ReasonTokenReviewFailed: the API server could not be asked; the
	// agent retries.
	ReasonTokenReviewFailed = "token-review-failed"
)

// Authenticator proves that the holder of a bearer token runs on a node.
// Authenticate returns nil when it does, or an [AuthError]. It is called
// once per stream, after the Hello, from many goroutines at once.
type Authenticator interface {
	Authenticate(ctx context.Context, token, node string) error
}

// AuthError is an [Authenticator]'s refusal. Reason is one of the Reason
// constants (the metric's label); Temporary refusals (the API server could
// not be asked) are Unavailable to the agent, which retries; the others
// are PermissionDenied or Unauthenticated.
type AuthError struct {
	Reason    string
	Temporary bool
	Err       error
}

func (e *AuthError) Error() string { return fmt.Sprintf("%s: %v", e.Reason, e.Err) }
func (e *AuthError) Unwrap() error { return e.Err }

// Is makes every AuthError match [ErrUnauthenticated].
func (e *AuthError) Is(target error) bool { return target == ErrUnauthenticated }

// authorizationKey is the gRPC metadata key of the agent's token.
const authorizationKey = "authorization"

// bearerToken returns the one bearer token of md, or why there is none.
func bearerToken(md metadata.MD) (string, error) {
	vals := md.Get(authorizationKey)
	switch {
	case len(vals) == 0:
		return "", errors.New("no authorization metadata: the agent sends its ServiceAccount token (--stream-token-file)")
	case len(vals) > 1:
		return "", fmt.Errorf("%d authorization values, want one", len(vals))
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok {
		return "", errors.New("authorization is not a Bearer token")
	}
	if err := validToken(tok); err != nil {
		return "", err
	}
	return tok, nil
}

// validToken checks a token's size and alphabet (a JWT's: base64url and
// dots); it says nothing of its validity.
func validToken(tok string) error {
	if tok == "" || len(tok) > MaxTokenBytes {
		return fmt.Errorf("token of %d bytes: want 1 to %d", len(tok), MaxTokenBytes)
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '=') {
			return fmt.Errorf("token byte %d is %q: want a JWT (base64url and dots)", i, c)
		}
	}
	return nil
}

// TokenFile returns a function that reads the token at path, as
// [Config.Token] wants: the kubelet rotates a projected token in place,
// so it is read again for every connection.
func TokenFile(path string) func() (string, error) {
	return func() (string, error) {
		fh, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("%w: token: %w", ErrConfig, err)
		}
		defer fh.Close()
		b, err := io.ReadAll(io.LimitReader(fh, MaxTokenBytes+1))
		if err != nil {
			return "", fmt.Errorf("%w: read token %s: %w", ErrConfig, path, err)
		}
		tok := strings.TrimSpace(string(b))
		if err := validToken(tok); err != nil {
			return "", fmt.Errorf("%w: token %s: %w", ErrConfig, path, err)
		}
		return tok, nil
	}
}

// authenticate proves that the stream's token is held on node, or
// refuses the stream.
func (s *Server) authenticate(ctx context.Context, node string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	tok, err := bearerToken(md)
	if err != nil {
		return s.refuse(ReasonTokenMissing, codes.Unauthenticated, err, "node", node)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AuthTimeout)
	defer cancel()
	err = s.cfg.Authenticate.Authenticate(ctx, tok, node)
	if err == nil {
		return nil
	}
	var ae *AuthError
	if !errors.As(err, &ae) {
		ae = &AuthError{Reason: ReasonTokenReviewFailed, Temporary: true, Err: err}
	}
	code := codes.PermissionDenied
	switch {
	case ae.Temporary:
		code = codes.Unavailable
	case ae.Reason == ReasonTokenInvalid:
		code = codes.Unauthenticated
	}
	return s.refuse(ae.Reason, code, err, "node", node)
}
