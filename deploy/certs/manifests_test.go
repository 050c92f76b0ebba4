// Package certs holds the telemetry stream's cert-manager manifests; this
// test decodes them strictly into the fields gpud relies on (cert-manager's
// Go types are not a dependency).
package certs

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/internal/manifest"
)

type issuerRef struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
}

type certificate struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		// Certificate
		IsCA        bool      `json:"isCA"`
		CommonName  string    `json:"commonName"`
		SecretName  string    `json:"secretName"`
		Duration    string    `json:"duration"`
		RenewBefore string    `json:"renewBefore"`
		DNSNames    []string  `json:"dnsNames"`
		Usages      []string  `json:"usages"`
		IssuerRef   issuerRef `json:"issuerRef"`
		PrivateKey  struct {
			Algorithm string `json:"algorithm"`
			Size      int    `json:"size"`
		} `json:"privateKey"`
		// Issuer
		SelfSigned *struct{} `json:"selfSigned"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca"`
	} `json:"spec"`
}

func TestCertManagerManifests(t *testing.T) {
	data, err := os.ReadFile("cert-manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	issuers := map[string]certificate{}
	var certs []certificate
	for i, doc := range bytes.Split(data, []byte("\n---")) {
		var c certificate
		if err := manifest.DecodeInto(doc, &c); err != nil {
			t.Fatalf("doc %d: %v", i, err)
		}
		if c.APIVersion != "cert-manager.io/v1" || c.Metadata.Namespace != "gpud" {
			t.Errorf("doc %d: %s in %q, want cert-manager.io/v1 in gpud", i, c.APIVersion, c.Metadata.Namespace)
		}
		switch c.Kind {
		case "Issuer":
			issuers[c.Metadata.Name] = c
		case "Certificate":
			certs = append(certs, c)
		default:
			t.Errorf("doc %d: kind %q", i, c.Kind)
		}
	}
	bySecret := map[string]certificate{}
	for _, c := range certs {
		if _, ok := issuers[c.Spec.IssuerRef.Name]; !ok || c.Spec.IssuerRef.Kind != "Issuer" {
			t.Errorf("certificate %s: issuer %+v is not in the file", c.Metadata.Name, c.Spec.IssuerRef)
		}
		bySecret[c.Spec.SecretName] = c
	}
	if ca := issuers["gpud-telemetry-ca"].Spec.CA; ca == nil || !bySecret[ca.SecretName].Spec.IsCA {
		t.Error("the CA issuer does not use the CA certificate's Secret")
	}
	sched, ok := bySecret["gpud-scheduler-tls"]
	if !ok || !slices.Contains(sched.Spec.Usages, "server auth") || !slices.Contains(sched.Spec.DNSNames, "gpud-scheduler-telemetry.gpud.svc") ||
		sched.Spec.IssuerRef.Name != "gpud-telemetry-ca" {
		t.Errorf("scheduler certificate %+v: want server auth for the telemetry Service, from the CA issuer", sched.Spec)
	}
	agent, ok := bySecret["gpud-agent-tls"]
	if !ok || agent.Spec.CommonName != "gpud-agent" || !slices.Contains(agent.Spec.Usages, "client auth") || agent.Spec.IssuerRef.Name != "gpud-telemetry-ca" {
		t.Errorf("agent certificate %+v: want CN gpud-agent, client auth, from the CA issuer, in Secret gpud-agent-tls", agent.Spec)
	}
	for _, c := range certs {
		// The node is the token's to prove: a certificate naming a node
		// would suggest otherwise.
		if strings.HasPrefix(c.Spec.CommonName, "system:node:") || len(c.Spec.DNSNames) > 0 && slices.Contains(c.Spec.Usages, "client auth") {
			t.Errorf("certificate %s names a node (%s %v)", c.Metadata.Name, c.Spec.CommonName, c.Spec.DNSNames)
		}
	}
}
