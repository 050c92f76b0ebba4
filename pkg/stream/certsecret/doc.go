// Package certsecret issues the telemetry stream's transport certificates
// into Kubernetes Secrets, for clusters without cert-manager (`gpud
// certs`): the CA (created once, then reused, a cert-manager CA's Secret
// included), the scheduler's serving certificate and the agents' one
// client certificate.
//
// The certificates themselves are package stream's ([stream.CA]); this
// package adds client-go, which stream must not import.
package certsecret
