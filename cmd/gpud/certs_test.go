package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestCertsWritesSecrets(t *testing.T) {
	// An older gpud's agent Secret: every node's key in one place.
	client := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: defaultAgentSecret, Namespace: "gpud"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"ca.crt": []byte("old"), "node-a.crt": []byte("a"), "node-a.key": []byte("a"), "node-b.crt": []byte("b"), "node-b.key": []byte("b")}})
	o := &certsOptions{namespace: "gpud", caSecret: defaultCASecret, schedulerSecret: defaultSchedulerSecret,
		agentSecret: defaultAgentSecret, validity: 24 * time.Hour, caValidity: 48 * time.Hour}
	if errs := o.validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	now := time.Now()
	res, err := o.write(t.Context(), client, now)
	if err != nil {
		t.Fatal(err)
	}
	if res.ca != "created" || res.removed != 4 {
		t.Fatalf("result %+v, want a new CA and the 4 per-node entries removed", res)
	}
	get := func(name string) *corev1.Secret {
		s, err := client.CoreV1().Secrets("gpud").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ca := get(defaultCASecret)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.Data["ca.crt"]) {
		t.Fatal("CA secret has no certificate")
	}
	sched := get(defaultSchedulerSecret)
	sc, err := tls.X509KeyPair(sched.Data["tls.crt"], sched.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "gpud-scheduler-telemetry.gpud.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("scheduler certificate: %v", err)
	}
	agent := get(defaultAgentSecret)
	if keys := slices.Sorted(maps.Keys(agent.Data)); !slices.Equal(keys, []string{"ca.crt", "tls.crt", "tls.key"}) {
		t.Errorf("agent Secret keys %v, want ca.crt, tls.crt, tls.key only (no node's key)", keys)
	}
	kp, err := tls.X509KeyPair(agent.Data["tls.crt"], agent.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	if kp.Leaf.Subject.CommonName != "gpud-agent" || len(kp.Leaf.DNSNames) != 0 {
		t.Errorf("agent certificate CN %q, SANs %v: want gpud-agent and no node name", kp.Leaf.Subject.CommonName, kp.Leaf.DNSNames)
	}
	if _, err := kp.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("agent certificate: %v", err)
	}

	// A rerun keeps the CA: the certificates it signed stay valid.
	res, err = o.write(t.Context(), client, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if res.ca != "reused" || res.removed != 0 || string(get(defaultCASecret).Data["ca.crt"]) != string(ca.Data["ca.crt"]) {
		t.Errorf("rerun: %+v, want the same CA reused and nothing removed", res)
	}

	// A cert-manager CA's Secret (tls.crt, tls.key) is reused too.
	cm, err := client.CoreV1().Secrets("gpud").Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cm-ca", Namespace: "gpud"},
		Data: map[string][]byte{"tls.crt": ca.Data["ca.crt"], "tls.key": ca.Data["ca.key"]}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o.caSecret = cm.Name
	if res, err := o.write(t.Context(), client, now.Add(time.Hour)); err != nil || res.ca != "reused" {
		t.Errorf("cert-manager CA: %+v, %v; want it reused", res, err)
	}

	// A CA that would expire before new leaves is refused.
	o.validity = 47 * time.Hour
	if _, err := o.write(t.Context(), client, now.Add(2*time.Hour)); err == nil || !strings.Contains(err.Error(), "delete it to make a new CA") {
		t.Errorf("expiring CA: %v", err)
	}
}

func TestCertsFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--namespace", "Bad_NS"}, "--namespace"},
		// Per-node certificates are gone: each flag that chose nodes is
		// refused with why, whatever its value.
		{[]string{"--nodes", "node-c"}, "--nodes"},
		{[]string{"--nodes", ","}, "no longer get per-node certificates"},
		{[]string{"--node-selector", "nvidia.com/gpu.present=true"}, "--node-selector"},
		{[]string{"--validity", "1m"}, "--validity"},
		{[]string{"--validity", "48h", "--ca-validity", "24h"}, "--ca-validity"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			err := runCerts(t.Context(), tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
