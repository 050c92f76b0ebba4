package stream

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CA is a certificate authority for the stream's certificates: the one
// `gpud certs` writes into a Secret, and the tests' own.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertPEM and KeyPEM are the CA's certificate and key.
	CertPEM, KeyPEM []byte
}

// NewCA makes a self-signed ECDSA P-256 CA valid from now for validity.
func NewCA(commonName string, now time.Time, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("stream: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("stream: CA certificate: %w", err)
	}
	return caFrom(der, key)
}

func caFrom(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("stream: parse CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("stream: CA key: %w", err)
	}
	return &CA{Cert: cert, key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})}, nil
}

// ParseCA reads a CA back from its PEM certificate and EC key (an
// existing Secret's).
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("%w: CA certificate or key is not PEM", ErrTLSConfig)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: CA key: %w", ErrTLSConfig, err)
	}
	return caFrom(cb.Bytes, key)
}

// Leaf is what [CA.Issue] signs.
type Leaf struct {
	// CommonName is "system:node:<node>" for an agent.
	CommonName string
	// DNSNames and IPs are the SANs: the node name for an agent, the
	// Service's names for the scheduler.
	DNSNames []string
	IPs      []net.IP
	// Server and Client select the extended key usages.
	Server, Client bool
	NotBefore      time.Time
	Validity       time.Duration
}

// Issue signs a new ECDSA P-256 key for leaf; it returns the certificate
// and key PEM.
func (ca *CA) Issue(leaf Leaf) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("stream: key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: leaf.CommonName},
		DNSNames:     leaf.DNSNames,
		IPAddresses:  leaf.IPs,
		NotBefore:    leaf.NotBefore.Add(-time.Minute),
		NotAfter:     leaf.NotBefore.Add(leaf.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if leaf.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if leaf.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("stream: sign %q: %w", leaf.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("stream: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // crypto/rand never fails on Linux
	}
	return n
}
