package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestCertsWritesSecrets(t *testing.T) {
	node := func(name string, gpu bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if gpu {
			n.Labels["nvidia.com/gpu.present"] = "true"
		}
		return n
	}
	client := fake.NewClientset(node("gpu-1", true), node("gpu-2", true), node("cpu-1", false))
	o := &certsOptions{namespace: "gpud", nodeSelector: "nvidia.com/gpu.present=true", caSecret: defaultCASecret, schedulerSecret: defaultSchedulerSecret,
		agentSecret: defaultAgentSecret, validity: 24 * time.Hour, caValidity: 48 * time.Hour}
	if errs := o.validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	now := time.Now()
	res, err := o.write(t.Context(), client, now)
	if err != nil {
		t.Fatal(err)
	}
	if res.ca != "created" || strings.Join(res.nodes, ",") != "gpu-1,gpu-2" {
		t.Fatalf("result %+v, want a new CA and the two GPU nodes", res)
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
	for _, n := range []string{"gpu-1", "gpu-2"} {
		kp, err := tls.X509KeyPair(agent.Data[n+".crt"], agent.Data[n+".key"])
		if err != nil {
			t.Fatalf("node %s: %v", n, err)
		}
		if kp.Leaf.Subject.CommonName != "system:node:"+n {
			t.Errorf("node %s: CN %q", n, kp.Leaf.Subject.CommonName)
		}
		if _, err := kp.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("node %s: %v", n, err)
		}
	}
	if _, ok := agent.Data["cpu-1.crt"]; ok {
		t.Error("a certificate for a node outside --node-selector")
	}

	// A rerun for a new node keeps the CA: existing certificates stay valid.
	o.nodes, o.nodeSelector = "gpu-3", ""
	res, err = o.write(t.Context(), client, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if res.ca != "reused" || string(get(defaultCASecret).Data["ca.crt"]) != string(ca.Data["ca.crt"]) {
		t.Errorf("rerun: CA %s, want the same one reused", res.ca)
	}
	if _, ok := get(defaultAgentSecret).Data["gpu-3.crt"]; !ok {
		t.Error("rerun: no certificate for gpu-3")
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
		{[]string{"--nodes", "ok,Not OK"}, "--nodes"},
		{[]string{"--node-selector", "a in (b"}, "--node-selector"},
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
