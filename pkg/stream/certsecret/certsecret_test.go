package certsecret

import (
	"crypto/tls"
	"crypto/x509"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestWrite(t *testing.T) {
	// An older gpud's agent Secret: every node's key in one place.
	client := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: DefaultAgentSecret, Namespace: "gpud"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"ca.crt": []byte("old"), "node-a.crt": []byte("a"), "node-a.key": []byte("a"), "node-b.crt": []byte("b"), "node-b.key": []byte("b")}})
	cfg := Config{Namespace: "gpud", CASecret: DefaultCASecret, SchedulerSecret: DefaultSchedulerSecret, AgentSecret: DefaultAgentSecret,
		SchedulerNames: DefaultSchedulerNames("gpud"), Validity: 24 * time.Hour, CAValidity: 48 * time.Hour}
	now := time.Now()
	res, err := Write(t.Context(), client, cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	if res.CA != "created" || res.Removed != 4 {
		t.Fatalf("result %+v, want a new CA and the 4 per-node entries removed", res)
	}
	get := func(name string) *corev1.Secret {
		s, err := client.CoreV1().Secrets("gpud").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ca := get(DefaultCASecret)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.Data["ca.crt"]) {
		t.Fatal("CA secret has no certificate")
	}
	sched := get(DefaultSchedulerSecret)
	sc, err := tls.X509KeyPair(sched.Data["tls.crt"], sched.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "gpud-scheduler-telemetry.gpud.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("scheduler certificate: %v", err)
	}
	agent := get(DefaultAgentSecret)
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
	res, err = Write(t.Context(), client, cfg, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if res.CA != "reused" || res.Removed != 0 || string(get(DefaultCASecret).Data["ca.crt"]) != string(ca.Data["ca.crt"]) {
		t.Errorf("rerun: %+v, want the same CA reused and nothing removed", res)
	}

	// A cert-manager CA's Secret (tls.crt, tls.key) is reused too.
	cm, err := client.CoreV1().Secrets("gpud").Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cm-ca", Namespace: "gpud"},
		Data: map[string][]byte{"tls.crt": ca.Data["ca.crt"], "tls.key": ca.Data["ca.key"]}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.CASecret = cm.Name
	if res, err := Write(t.Context(), client, cfg, now.Add(time.Hour)); err != nil || res.CA != "reused" {
		t.Errorf("cert-manager CA: %+v, %v; want it reused", res, err)
	}

	// A CA that would expire before new leaves is refused.
	cfg.Validity = 47 * time.Hour
	if _, err := Write(t.Context(), client, cfg, now.Add(2*time.Hour)); err == nil || !strings.Contains(err.Error(), "delete it to make a new CA") {
		t.Errorf("expiring CA: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Namespace: "gpud", CASecret: "a", SchedulerSecret: "b", AgentSecret: "c", SchedulerNames: []string{"s"}, Validity: time.Hour, CAValidity: time.Hour}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" valid
	}{
		{name: "valid", edit: func(*Config) {}},
		{name: "no namespace", edit: func(c *Config) { c.Namespace = "" }, want: "empty namespace"},
		{name: "no names", edit: func(c *Config) { c.SchedulerNames = nil }, want: "no scheduler DNS name"},
		{name: "CA shorter than leaves", edit: func(c *Config) { c.CAValidity = time.Minute }, want: "want 0 < validity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}
