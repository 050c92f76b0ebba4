package stream

import (
	"crypto/x509"
	"errors"
	"strings"
	"sync"
	"time"
)

// handshakeReason is the refused_total reason of a failed TLS handshake.
func handshakeReason(err error) string {
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &unknown):
		return "tls-unknown-ca"
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return "tls-certificate-expired"
	case errors.As(err, &invalid):
		return "tls-certificate-invalid"
	case strings.Contains(err.Error(), "didn't provide a certificate"): // crypto/tls has no typed error for it
		return "tls-no-client-certificate"
	}
	return "tls-handshake"
}

// logLimiter lets through the first line of each key, then at most one
// per every, saying how many it held back since the last. Keys are few
// (the handshake reasons).
type logLimiter struct {
	every time.Duration

	mu   sync.Mutex
	keys map[string]*logKey
}

type logKey struct {
	last       time.Time
	suppressed int
}

func (l *logLimiter) allow(key string, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[string]*logKey{}
	}
	k := l.keys[key]
	if k == nil {
		l.keys[key] = &logKey{last: now}
		return true, 0
	}
	if now.Sub(k.last) < l.every {
		k.suppressed++
		return false, 0
	}
	suppressed, k.suppressed, k.last = k.suppressed, 0, now
	return true, suppressed
}
