package test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/test/k8senv"
)

// kueueVersion is the Kueue release hack/kueue-bin.sh builds by default
// (GPUD_KUEUE_VERSION overrides it for both).
const kueueVersion = "v0.17.0"

// kueueTimeout bounds each wait on Kueue: its reconcilers run on every
// change, so admission takes well under a second on an idle machine.
const kueueTimeout = 120 * time.Second

var (
	kueueWorkloadGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
	kueueGVRs        = map[string]schema.GroupVersionResource{
		"ResourceFlavor": {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"},
		"ClusterQueue":   {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"},
		"LocalQueue":     {Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"},
	}
)

// TestKueueAdmitsGpudPlaces runs the real Kueue controller manager
// (hack/kueue-bin.sh: sigs.k8s.io/kueue at kueueVersion, with its CRDs)
// beside `gpud scheduler` on a real kube-apiserver, with
// kube-controller-manager's Job and ResourceClaim controllers and a
// simulated DGX H100 (`gpud agent --kubelet-api dra`: 8 GPUs in
// ResourceSlices). Kueue counts the GPUs of each pod's
// ResourceClaimTemplate against a ClusterQueue through its DRA accounting
// (feature gate DynamicResourceAllocation, deviceClassMappings
// gpu.gpud.io → gpud.io/gpu; testdata/kueue-queues.yaml: 2 GPUs).
//
// Two Indexed Jobs of 2 pods × 1 GPU (testdata/kueue-job.yaml): the first
// is admitted and gpud binds its pods as one gang; the second does not fit
// the quota (the node has 8 GPUs: only Kueue holds it), stays suspended
// with no pod, and its Workload says why. The test, acting as the
// kubelet, finishes the first Job's pods: Kueue frees the quota, admits
// the second Job, gpud binds its gang. Then a plain pod Kueue manages (its
// pod integration: the kueue.x-k8s.io/admission scheduling gate) waits
// gated while the second Job holds the quota: gpud must not bind it; the
// second finishes, Kueue lifts the gate, gpud binds the pod.
//
// What a real install has that this test does not: Kueue's mutating and
// validating webhooks are not registered with the API server (the Job is
// created already suspended with its queue-name label, and the plain pod
// already carries the admission gate and the managed label, which is what
// those webhooks would add); Kueue runs with the admin identity instead of
// its ClusterRole; there is no kubelet (the test writes the pod phases).
// Kueue's own certificate management runs as installed: it finds the
// webhook Secret this test pre-fills with a CA and a serving certificate
// for both the in-cluster Service name and 127.0.0.1, and the CRDs'
// conversion webhooks point at Kueue's webhook server by URL.
func TestKueueAdmitsGpudPlaces(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver, kube-controller-manager, Kueue, a gpud agent and gpud scheduler")
	}
	kueueDir := kueueBins(t)
	bin := buildGpud(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	env.StartControllerManager(t, "job-controller", "resourceclaim-controller")
	c := env.Client
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"ml", "kueue-system"} {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Kueue: its CRDs, the webhook Secret its certificate manager reads,
	// the manager itself.
	webhookAddr := k8senv.FreeAddr(t)
	installKueueCRDs(t, env, dyn, filepath.Join(kueueDir, "crds"), webhookAddr)
	certs := kueueWebhookSecret(t, env)
	kueue := startKueue(t, env, filepath.Join(kueueDir, "kueue-manager"), webhookAddr, certs)

	// gpud: DeviceClasses, one simulated DGX H100 publishing 8 GPUs,
	// the scheduler with its shipped RBAC.
	createDeviceClasses(t, c)
	node := &schedNode{name: "kq-a", profile: "dgx-h100"}
	startSchedAgent(t, env, bin, node)
	waitGPUs(t, env, schedTimeout, 8, node.name)
	sched := startSchedulerProc(t, bin, filepath.Join(shortDir(t), "s"), schedulerIdentity(t, env))
	waitForLeader(t, []*schedProc{sched}, nil)

	// The queues and the jobs' claim template.
	for _, u := range yamlDocs(t, readFile(t, "testdata/kueue-queues.yaml")) {
		gvr, ok := kueueGVRs[u.GetKind()]
		if !ok {
			t.Fatalf("testdata/kueue-queues.yaml: unexpected kind %s", u.GetKind())
		}
		r := dyn.Resource(gvr)
		var ri dynamic.ResourceInterface = r
		if u.GetNamespace() != "" {
			ri = r.Namespace(u.GetNamespace())
		}
		if _, err := ri.Create(ctx, u, strict); err != nil {
			t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	rct, job := kueueJobManifest(t)
	if _, err := c.ResourceV1().ResourceClaimTemplates("ml").Create(ctx, rct, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testwait.ForErr(t, kueueTimeout, "ClusterQueue gpus active", func() error {
		cq, err := dyn.Resource(kueueGVRs["ClusterQueue"]).Get(ctx, "gpus", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cond := kueueCondition(cq, "Active"); cond["status"] != "True" {
			return fmt.Errorf("Active condition %v", cond)
		}
		return nil
	})

	// The first job fits the quota: admitted, bound as one gang.
	createKueueJob(t, env, job, "train-a")
	podsA := waitJobPods(t, env, "train-a", 2)
	testwait.For(t, schedTimeout, "train-a's 2 pods bound", func() bool { return len(boundOf(t, env, podsA)) == 2 })
	checkGangBinds(t, sched, "ml/job:train-a", podsA)
	checkKueueUsage(t, dyn, "train-a", "2")

	// The second does not: Kueue holds it (suspended, no pod), and its
	// Workload names the GPU quota.
	createKueueJob(t, env, job, "train-b")
	testwait.ForErr(t, kueueTimeout, "train-b's Workload pending on the GPU quota", func() error {
		wl, err := jobWorkload(t, dyn, "train-b")
		if err != nil {
			return err
		}
		cond := kueueCondition(wl, "QuotaReserved")
		if cond["status"] != "False" || !strings.Contains(fmt.Sprint(cond["message"]), "gpud.io/gpu") {
			return fmt.Errorf("QuotaReserved condition %v", cond)
		}
		t.Logf("train-b waits in Kueue: %s", cond["message"])
		return nil
	})

	time.Sleep(3 * time.Second) // gpud's cycles run every 2 s (--resync-period) and on every change
	checkHeld(t, env, "train-b", "")

	// The first job finishes: the second is admitted and bound as one gang.
	freed := time.Now()
	finishJobPods(t, env, "train-a", podsA)
	podsB := waitJobPods(t, env, "train-b", 2)
	testwait.For(t, schedTimeout, "train-b's 2 pods bound", func() bool { return len(boundOf(t, env, podsB)) == 2 })
	t.Logf("train-b: admitted and bound %s after train-a's pods finished (loaded machine)", time.Since(freed).Round(time.Millisecond))
	checkGangBinds(t, sched, "ml/job:train-b", podsB)
	checkKueueUsage(t, dyn, "train-b", "2")

	// A plain pod Kueue manages, over the quota train-b holds, waits
	// behind its scheduling gate. (It is created only now: made while
	// train-b waited, Kueue could admit it into quota train-a's pods
	// free one by one, ahead of train-b, and the test's order would race.)
	gated := createGatedKueuePod(t, env, "solo")
	time.Sleep(3 * time.Second)
	checkHeld(t, env, "", gated)

	// The second job finishes: Kueue admits the pod, lifts the gate, gpud
	// binds it.
	freed = time.Now()
	finishJobPods(t, env, "train-b", podsB)
	testwait.For(t, schedTimeout, "the gated pod bound once Kueue admitted it", func() bool { return len(boundOf(t, env, []string{gated})) == 1 })
	t.Logf("%s: ungated and bound %s after train-b's pods finished (loaded machine)", gated, time.Since(freed).Round(time.Millisecond))
	if log, _ := os.ReadFile(kueue.LogPath); strings.Contains(string(log), "panic") {
		t.Errorf("Kueue's log has a panic: %s", kueue.Tail(40))
	}
}

// kueueBins returns hack/kueue-bin.sh's directory (the manager and crds/),
// skipping the test when it is missing unless GPUD_REQUIRE_KUEUE=1 (CI
// sets it once the script built them), as k8senv does with
// GPUD_REQUIRE_K8S.
func kueueBins(t *testing.T) string {
	t.Helper()
	version := os.Getenv("GPUD_KUEUE_VERSION")
	if version == "" {
		version = kueueVersion
	}
	root := os.Getenv("GPUD_KUEUE_BINS")
	if root == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				t.Fatalf("kueue: neither GPUD_KUEUE_BINS, XDG_CACHE_HOME nor HOME is set: %v", err)
			}
			cache = filepath.Join(home, ".cache")
		}
		root = filepath.Join(cache, "gpud", "kueue")
	}
	dir := filepath.Join(root, version)
	var missing []string
	for _, p := range []string{filepath.Join(dir, "kueue-manager"), filepath.Join(dir, "crds", "kueue.x-k8s.io_workloads.yaml")} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("Kueue %s missing: %s; build it with hack/kueue-bin.sh (cached by version; GPUD_KUEUE_BINS overrides the cache dir)",
			version, strings.Join(missing, ", "))
		if os.Getenv("GPUD_REQUIRE_KUEUE") == "1" {
			t.Fatalf("%s (GPUD_REQUIRE_KUEUE=1)", msg)
		}
		t.Skipf("%s (set GPUD_REQUIRE_KUEUE=1 to fail instead of skip)", msg)
	}
	return dir
}

// kueueConversionCRDs are the CRDs whose conversion webhook Kueue's
// certificate manager injects its CA into (it waits for all of them
// before the manager starts).
var kueueConversionCRDs = []string{"localqueues", "clusterqueues", "workloads", "cohorts", "multikueueclusters"}

// installKueueCRDs creates every CRD of dir (Kueue's
// config/components/crd/bases) with, on kueueConversionCRDs, the
// conversion webhook a real install patches in, by URL at webhookAddr,
// and waits until the API server serves kueue.x-k8s.io/v1beta2.
func installKueueCRDs(t *testing.T, env *k8senv.Env, dyn dynamic.Interface, dir, webhookAddr string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Kueue CRDs in %s (%v)", dir, err)
	}
	var plurals []string
	for _, f := range files {
		docs := yamlDocs(t, readFile(t, f))
		if len(docs) != 1 {
			t.Fatalf("%s: %d documents, want one CRD", f, len(docs))
		}
		crd := docs[0]
		plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
		plurals = append(plurals, plural)
		if slices.Contains(kueueConversionCRDs, plural) {
			conv := map[string]any{"strategy": "Webhook", "webhook": map[string]any{
				"conversionReviewVersions": []any{"v1"},
				"clientConfig":             map[string]any{"url": "https://" + webhookAddr + "/convert"},
			}}
			if err := unstructured.SetNestedMap(crd.Object, conv, "spec", "conversion"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := dyn.Resource(crdGVR).Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create CRD from %s: %v", f, err)
		}
	}
	testwait.ForErr(t, kueueTimeout, "Kueue's CRDs served", func() error {
		list, err := env.Client.Discovery().ServerResourcesForGroupVersion("kueue.x-k8s.io/v1beta2")
		if err != nil {
			return err
		}
		for _, p := range plurals {
			if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == p }) {
				return fmt.Errorf("%s not in discovery", p)
			}
		}
		return nil
	})
}

// kueueWebhookSecret creates the Secret Kueue's certificate manager keeps
// its CA and serving certificate in (a real install creates it empty), with
// a CA and a certificate valid for both the Service name Kueue checks
// (kueue-webhook-service.kueue-system.svc) and 127.0.0.1, where the API
// server reaches the webhook server here. Kueue finds them valid and keeps
// them. It returns the Secret's data (what the kubelet would mount in
// Kueue's pod).
func kueueWebhookSecret(t *testing.T, env *k8senv.Env) map[string][]byte {
	t.Helper()
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kueue-ca", Organization: []string{"kueue"}},
		DNSNames: []string{"kueue-ca"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kueue-webhook-service.kueue-system.svc"},
		DNSNames: []string{"kueue-webhook-service.kueue-system.svc"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pemOf := func(typ string, b []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}) }
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kueue-webhook-server-cert", Namespace: "kueue-system"},
		Data: map[string][]byte{
			"ca.crt":  pemOf("CERTIFICATE", caDER),
			"ca.key":  pemOf("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(caKey)),
			"tls.crt": pemOf("CERTIFICATE", der),
			"tls.key": pemOf("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)),
		}}
	if _, err := env.Client.CoreV1().Secrets("kueue-system").Create(t.Context(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return secret.Data
}

// startKueue runs Kueue's manager with the admin kubeconfig: no leader
// election, the webhook server on webhookAddr, health on a free port, no
// metrics server and no visibility API server (neither is used here),
// integrations batch/job and pod, and DRA accounting of gpud's whole GPUs;
// certs (the webhook Secret's data) are written where a real install
// mounts the Secret (Kueue's certificate manager waits for them there). It
// waits for /readyz.
func startKueue(t *testing.T, env *k8senv.Env, bin, webhookAddr string, certs map[string][]byte) *k8senv.Proc {
	t.Helper()
	dir := filepath.Join(env.Dir, "kueue")
	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range certs {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	host, port, _ := net.SplitHostPort(webhookAddr)
	health := k8senv.FreeAddr(t)
	conf := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: %s
metrics:
  bindAddress: "0"
webhook:
  host: %s
  port: %s
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
  webhookServiceName: kueue-webhook-service
  webhookSecretName: kueue-webhook-server-cert
integrations:
  frameworks: ["batch/job", "pod"]
resources:
  deviceClassMappings:
    - name: gpud.io/gpu
      deviceClassNames: ["gpu.gpud.io"]
`, health, host, port, certDir)
	confPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config=" + confPath, "--feature-gates=DynamicResourceAllocation=true,VisibilityOnDemand=false", "--zap-log-level=2"}
	p, err := k8senv.StartProc("kueue", bin, args, filepath.Join(env.Dir, "kueue.log"), k8senv.ProcOptions{Setup: func(cmd *exec.Cmd) {
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+dir, "TMPDIR="+dir, "KUBECONFIG="+env.Kubeconfig)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Kueue log (tail):\n%s", p.Tail(80))
		}
		p.Stop(10 * time.Second)
	})
	begin := time.Now()
	testwait.ForErr(t, kueueTimeout, "Kueue's /readyz", func() error {
		if exited, err := p.Exited(); exited {
			t.Fatalf("Kueue exited (%v):\n%s", err, p.Tail(40))
		}
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
	t.Logf("Kueue %s ready in %s (loaded machine)", kueueVersion, time.Since(begin).Round(time.Millisecond))
	return p
}

// kueueJobManifest reads testdata/kueue-job.yaml: the claim template and
// the Job.
func kueueJobManifest(t *testing.T) (*resourceapi.ResourceClaimTemplate, *batchv1.Job) {
	t.Helper()
	var rct *resourceapi.ResourceClaimTemplate
	var job *batchv1.Job
	for _, obj := range draManifests(t, "testdata/kueue-job.yaml") {
		switch o := obj.(type) {
		case *resourceapi.ResourceClaimTemplate:
			rct = o
		case *batchv1.Job:
			job = o
		}
	}
	if rct == nil || job == nil {
		t.Fatal("testdata/kueue-job.yaml: want a ResourceClaimTemplate and a Job")
	}
	return rct, job
}

func createKueueJob(t *testing.T, env *k8senv.Env, tmpl *batchv1.Job, name string) {
	t.Helper()
	job := tmpl.DeepCopy()
	job.Name = name
	if _, err := env.Client.BatchV1().Jobs("ml").Create(t.Context(), job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitJobPods waits until the Job controller has created n pods of job
// (after Kueue unsuspended it) and returns their names.
func waitJobPods(t *testing.T, env *k8senv.Env, job string, n int) []string {
	t.Helper()
	var names []string
	testwait.ForErr(t, kueueTimeout, job+": Kueue admits it and the Job controller creates its pods", func() error {
		pods := jobPods(t, env, job)
		if len(pods) != n {
			j, err := env.Client.BatchV1().Jobs("ml").Get(t.Context(), job, metav1.GetOptions{})
			if err != nil {
				return err
			}
			return fmt.Errorf("%d pods (suspend %v)", len(pods), j.Spec.Suspend != nil && *j.Spec.Suspend)
		}
		names = nil
		for _, p := range pods {
			names = append(names, p.Name)
		}
		return nil
	})
	return names
}

func jobPods(t *testing.T, env *k8senv.Env, job string) []corev1.Pod {
	t.Helper()
	list, err := env.Client.CoreV1().Pods("ml").List(t.Context(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// jobWorkload is the Workload Kueue made for job (owned by it).
func jobWorkload(t *testing.T, dyn dynamic.Interface, job string) (*unstructured.Unstructured, error) {
	t.Helper()
	list, err := dyn.Resource(kueueWorkloadGVR).Namespace("ml").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		for _, o := range list.Items[i].GetOwnerReferences() {
			if o.Kind == "Job" && o.Name == job {
				return &list.Items[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no Workload owned by Job %s", job)
}

// kueueCondition is the status condition typ of a Kueue object (nil if
// absent).
func kueueCondition(u *unstructured.Unstructured, typ string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}

// checkKueueUsage checks that Kueue admitted job's Workload counting want
// gpud.io/gpu (its DRA accounting of the claim template) against the
// ClusterQueue.
func checkKueueUsage(t *testing.T, dyn dynamic.Interface, job, want string) {
	t.Helper()
	wl, err := jobWorkload(t, dyn, job)
	if err != nil {
		t.Fatal(err)
	}
	psas, _, _ := unstructured.NestedSlice(wl.Object, "status", "admission", "podSetAssignments")
	var got []string
	for _, psa := range psas {
		usage, _, _ := unstructured.NestedStringMap(psa.(map[string]any), "resourceUsage")
		got = append(got, usage["gpud.io/gpu"])
	}
	if len(got) != 1 || got[0] != want {
		t.Errorf("%s: Workload admitted with gpud.io/gpu usage %v, want [%s] (Kueue's DRA accounting of the claim template)", job, got, want)
	}
}

// checkGangBinds checks that gpud bound every pod of pods as part of the
// gang key (its "pod bound" log lines name the gang).
func checkGangBinds(t *testing.T, sched *schedProc, key string, pods []string) {
	t.Helper()
	data, err := os.ReadFile(sched.logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		found := false
		for line := range strings.SplitSeq(string(data), "\n") {
			if strings.Contains(line, "pod bound") && strings.Contains(line, "ml/"+p) && strings.Contains(line, key) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("gpud's log has no \"pod bound\" line for ml/%s in gang %s", p, key)
		}
	}
}

// createGatedKueuePod creates a pod as Kueue's pod webhook leaves it: the
// queue-name and managed labels, Kueue's finalizer and the
// kueue.x-k8s.io/admission scheduling gate, with one GPU from the claim
// template.
func createGatedKueuePod(t *testing.T, env *k8senv.Env, name string) string {
	t.Helper()
	_, job := kueueJobManifest(t)
	spec := job.Spec.Template.Spec.DeepCopy()
	spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml",
		Labels:     map[string]string{"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/managed": "true"},
		Finalizers: []string{"kueue.x-k8s.io/managed"}}, Spec: *spec}
	if _, err := env.Client.CoreV1().Pods("ml").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// checkHeld asserts what Kueue holds stays held: job (if set) suspended
// with no pod, and the gated pod (if set) unbound with its gate.
func checkHeld(t *testing.T, env *k8senv.Env, job, gated string) {
	t.Helper()
	if job != "" {
		j, err := env.Client.BatchV1().Jobs("ml").Get(t.Context(), job, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if j.Spec.Suspend == nil || !*j.Spec.Suspend {
			t.Fatalf("%s: Kueue unsuspended a Job over quota", job)
		}
		if pods := jobPods(t, env, job); len(pods) > 0 {
			t.Fatalf("%s: %d pods of a Job Kueue holds", job, len(pods))
		}
	}
	if gated == "" {
		return
	}
	p, err := env.Client.CoreV1().Pods("ml").Get(t.Context(), gated, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Fatalf("%s: gpud bound a pod behind Kueue's scheduling gate (to %s)", gated, p.Spec.NodeName)
	}
	if !slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == "kueue.x-k8s.io/admission" }) {
		t.Fatalf("%s: Kueue lifted the admission gate of a pod over quota (gates %v)", gated, p.Spec.SchedulingGates)
	}
}

// finishJobPods does what the kubelet would when the job's containers
// exit 0: each pod Succeeded. The Job controller then completes the Job
// and Kueue frees its quota.
func finishJobPods(t *testing.T, env *k8senv.Env, job string, pods []string) {
	t.Helper()
	for _, name := range pods {
		p, err := env.Client.CoreV1().Pods("ml").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodSucceeded
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}}}
		if _, err := env.Client.CoreV1().Pods("ml").UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testwait.ForErr(t, kueueTimeout, job+" complete", func() error {
		j, err := env.Client.BatchV1().Jobs("ml").Get(t.Context(), job, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("succeeded %d, conditions %v", j.Status.Succeeded, j.Status.Conditions)
	})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
