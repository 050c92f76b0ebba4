package stream

import "errors"

// Sentinels of the package; errors wrap them with what failed.
var (
	// ErrTLSConfig is a missing or unusable certificate, key or CA file.
	ErrTLSConfig = errors.New("stream: TLS configuration")
	// ErrConfig is an invalid Config or ServerConfig field.
	ErrConfig = errors.New("stream: invalid configuration")
	// ErrInvalidMessage is an agent message the server refuses.
	ErrInvalidMessage = errors.New("stream: invalid message")
)

// ErrUnauthenticated is a stream whose node identity is not proven; every
// [AuthError] matches it.
var ErrUnauthenticated = errors.New("stream: node identity not proven")
