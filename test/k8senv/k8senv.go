// Package k8senv runs a real Kubernetes control plane for tests: etcd,
// kube-apiserver and kube-scheduler built from k8s.io/kubernetes at the
// version gpud's k8s.io modules are pinned to (hack/k8s-bins.sh), on free
// loopback ports, with all state under the test's temp dir.
//
// There is no kubelet and no kube-controller-manager: tests create Node
// objects (CreateNode) and act as the kubelet themselves. What the
// controller manager would do is therefore missing: no ResourceClaims are
// created from ResourceClaimTemplates (reference ResourceClaims by name), no
// node lifecycle (nodes stay Ready as created), no service-account token
// controller (TokenRequest works: ServiceAccountConfig), no garbage
// collection, no DeviceTaintRule eviction.
//
// Start skips the test when the binaries are missing, and fails it instead
// when GPUD_REQUIRE_K8S=1 (CI).
package k8senv

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// DefaultFeatureGates are set on kube-apiserver and kube-scheduler alike.
// In 1.37 the DRA API (resource.k8s.io/v1) is GA and on; these name the DRA
// features gpud relies on so that a change of their defaults cannot switch
// them off unnoticed, and turn on the Workload API, which is off by default:
//
//   - DRAConsumableCapacity (beta, default on): allowMultipleAllocations and
//     capacity request policies, for memory fractions.
//   - DRAPartitionableDevices (beta, default on): sharedCounters and
//     consumesCounters, for MIG placements.
//   - DRADeviceTaints, DRADeviceTaintRules (GA, default on): device taints
//     for health.
//   - DRAExtendedResource (GA, locked on): DeviceClass extendedResourceName.
//   - GenericWorkload (beta, default OFF): scheduling.k8s.io/v1beta1
//     Workload and PodGroup and the scheduler's gang scheduling; the API
//     group version is enabled with --runtime-config as well.
var DefaultFeatureGates = map[string]bool{
	"DRAConsumableCapacity":   true,
	"DRAPartitionableDevices": true,
	"DRADeviceTaints":         true,
	"DRADeviceTaintRules":     true,
	"DRAExtendedResource":     true,
	"GenericWorkload":         true,
}

// DefaultRuntimeConfig enables the API group versions that are off by
// default and that gpud uses.
const DefaultRuntimeConfig = "scheduling.k8s.io/v1beta1=true"

// Env is a running control plane. Its processes are stopped, and its
// directory removed, when the test that started it ends.
type Env struct {
	// Dir is the environment's directory (a t.TempDir()): etcd data,
	// certificates, kubeconfigs and <component>.log files.
	Dir string
	// Kubeconfig is the path of a kubeconfig for the admin identity
	// (user "k8senv-admin" in group system:masters).
	Kubeconfig string
	// Config is the admin identity's client configuration; Client uses it.
	Config *rest.Config
	Client kubernetes.Interface
	// APIServerURL is https://127.0.0.1:<port>; EtcdURL the etcd client URL.
	APIServerURL string
	EtcdURL      string
	Binaries     *Binaries
	// StartupTime is how long Start took from launching etcd until the last
	// component was ready; Phases breaks it down per component.
	StartupTime time.Duration
	Phases      map[string]time.Duration

	pki   *pki
	procs []*Proc
	// apiServer is the running kube-apiserver; apiServerStart starts it
	// again on the same port with the same flags (StartAPIServer).
	apiServer      *Proc
	apiServerStart func() (*Proc, error)
}

type options struct {
	gates          map[string]bool
	apiServerFlags []string
	schedulerFlags []string
	noScheduler    bool
	timeout        time.Duration
	podAPIAddr     net.IP
}

// Option changes how Start runs the control plane.
type Option func(*options)

// WithFeatureGates sets feature gates on kube-apiserver and kube-scheduler,
// over DefaultFeatureGates.
func WithFeatureGates(gates map[string]bool) Option {
	return func(o *options) {
		for k, v := range gates {
			o.gates[k] = v
		}
	}
}

// WithAPIServerFlags adds flags ("--name=value") to kube-apiserver's command
// line; one that Start sets too replaces Start's (for instance
// "--authorization-mode=Node,RBAC" or "--disable-admission-plugins=...").
// Feature gates go through WithFeatureGates.
func WithAPIServerFlags(flags ...string) Option {
	return func(o *options) { o.apiServerFlags = append(o.apiServerFlags, flags...) }
}

// WithSchedulerFlags adds flags to kube-scheduler's command line, as
// WithAPIServerFlags does to kube-apiserver's.
func WithSchedulerFlags(flags ...string) Option {
	return func(o *options) { o.schedulerFlags = append(o.schedulerFlags, flags...) }
}

// WithoutScheduler runs no kube-scheduler, for tests of another scheduler.
func WithoutScheduler() Option {
	return func(o *options) { o.noScheduler = true }
}

// WithPodAPIAccess lets pods on a real node (test/nodeenv) use the API
// server as pods in a cluster do, through the ServiceAccount token the
// kubelet mounts: the ServiceAccount admission plugin is on (every pod
// gets the projected kube-api-access volume, and its ServiceAccount must
// exist, so run kube-controller-manager, whose serviceaccount and
// root-ca-cert-publisher controllers create the "default" ServiceAccounts
// and the kube-root-ca.crt ConfigMaps), and the server listens on every
// address with addr, an address of this machine that pods reach (the
// node's pod-network gateway), in its serving certificate.
//
// There is no kube-proxy, so the "kubernetes" Service's ClusterIP leads
// nowhere: point a pod at the server as clusters without kube-proxy do,
// with KUBERNETES_SERVICE_HOST=addr and KUBERNETES_SERVICE_PORT=
// [Env.APIServerPort] set on its container (an explicit variable wins over
// the service variables the kubelet injects).
//
// Off by default: the other tests create pods in namespaces without a
// controller manager, which ServiceAccount admission would refuse.
func WithPodAPIAccess(addr net.IP) Option {
	return func(o *options) { o.podAPIAddr = addr }
}

// WithStartTimeout bounds how long each component may take to become ready
// (default 3 minutes: a loaded CI machine is slow).
func WithStartTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// Start runs etcd, kube-apiserver and (unless WithoutScheduler)
// kube-scheduler and returns once all are ready. It skips t when the
// binaries are missing (fails it under GPUD_REQUIRE_K8S=1).
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	o := &options{gates: map[string]bool{}, timeout: 3 * time.Minute}
	for k, v := range DefaultFeatureGates {
		o.gates[k] = v
	}
	for _, opt := range opts {
		opt(o)
	}
	bins, err := FindBinaries()
	if err != nil {
		if os.Getenv("GPUD_REQUIRE_K8S") == "1" {
			t.Fatalf("%v (GPUD_REQUIRE_K8S=1)", err)
		}
		t.Skipf("%v (set GPUD_REQUIRE_K8S=1 to fail instead of skip)", err)
	}
	e := &Env{Dir: t.TempDir(), Binaries: bins, Phases: map[string]time.Duration{}}
	t.Cleanup(func() { e.stop(t) })

	begin := time.Now()
	phase := begin
	mark := func(name string) {
		now := time.Now()
		e.Phases[name] = now.Sub(phase)
		phase = now
	}
	if err := e.startEtcd(o.timeout); err != nil {
		t.Fatal(err)
	}
	mark("etcd")
	if err := e.startAPIServer(o); err != nil {
		t.Fatal(err)
	}
	mark("kube-apiserver")
	if !o.noScheduler {
		if err := e.startScheduler(o); err != nil {
			t.Fatal(err)
		}
		mark("kube-scheduler")
	}
	e.StartupTime = time.Since(begin)
	t.Logf("k8senv: Kubernetes %s (%s, %s) ready in %s: %s; kubeconfig %s",
		KubeVersion(), bins.Dir, bins.EtcdVersion, e.StartupTime.Round(time.Millisecond), e.phaseSummary(), e.Kubeconfig)
	return e
}

func (e *Env) phaseSummary() string {
	var parts []string
	for _, name := range []string{"etcd", "kube-apiserver", "kube-scheduler"} {
		if d, ok := e.Phases[name]; ok {
			parts = append(parts, fmt.Sprintf("%s %s", name, d.Round(time.Millisecond)))
		}
	}
	return strings.Join(parts, ", ")
}

// stop ends the processes, newest first, after dumping their logs' tails
// when the test failed.
func (e *Env) stop(t testing.TB) {
	if t.Failed() {
		for _, p := range e.procs {
			t.Logf("k8senv: last lines of %s (%s):\n%s", p.Name, p.LogPath, p.Tail(60))
		}
	}
	for _, p := range slices.Backward(e.procs) {
		p.Stop(10 * time.Second)
	}
}

// APIServerPort is the port kube-apiserver serves on (on 127.0.0.1, and
// on every address with WithPodAPIAccess).
func (e *Env) APIServerPort() string {
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(e.APIServerURL, "https://"))
	return port
}

// LogPath is the log file of component ("etcd", "kube-apiserver",
// "kube-scheduler").
func (e *Env) LogPath(component string) string {
	return filepath.Join(e.Dir, component+".log")
}

// freePort returns a loopback port nothing listens on right now. Another
// process may take it before the component binds it; the start functions
// retry with new ports when that happens.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("k8senv: no free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddr returns a loopback host:port nothing listens on right now, for a
// process the test starts beside the environment (the same caveat as
// freePort: another process may take it first).
func FreeAddr(t testing.TB) string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// startRetrying starts a component and waits for it; when it exits because
// one of its ports was taken in the meantime, it tries again with new ports.
func (e *Env) startRetrying(start func() (*Proc, error)) error {
	const attempts = 3
	for i := 1; ; i++ {
		p, err := start()
		if p != nil {
			e.procs = append(e.procs, p)
		}
		if err == nil {
			return nil
		}
		if p == nil || !p.exited() || !p.portInUse() || i == attempts {
			return err
		}
		e.procs = e.procs[:len(e.procs)-1]
		_ = os.Rename(p.LogPath, fmt.Sprintf("%s.attempt%d", p.LogPath, i))
	}
}

func (e *Env) startEtcd(timeout time.Duration) error {
	return e.startRetrying(func() (*Proc, error) {
		client, err := freePort()
		if err != nil {
			return nil, err
		}
		peer, err := freePort()
		if err != nil {
			return nil, err
		}
		dataDir := filepath.Join(e.Dir, "etcd-data")
		if err := os.RemoveAll(dataDir); err != nil {
			return nil, err
		}
		e.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(client)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
		p, err := startProc(e.Dir, "etcd", e.Binaries.Etcd, []string{
			"--name=k8senv",
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + e.EtcdURL,
			"--advertise-client-urls=" + e.EtcdURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=k8senv=" + peerURL,
			"--initial-cluster-state=new",
			"--logger=zap",
		})
		if err != nil {
			return nil, err
		}
		hc := &http.Client{Timeout: 2 * time.Second}
		return p, waitFor(p, "etcd to report healthy at "+e.EtcdURL+"/health", timeout, func() error {
			resp, err := hc.Get(e.EtcdURL + "/health")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
				return fmt.Errorf("%s: %s", resp.Status, body)
			}
			return nil
		})
	})
}

func (e *Env) startAPIServer(o *options) error {
	var err error
	if e.pki, err = newPKI(); err != nil {
		return fmt.Errorf("k8senv: CA: %w", err)
	}
	pkiDir := filepath.Join(e.Dir, "pki")
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return err
	}
	serveIPs := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)}
	if o.podAPIAddr != nil {
		serveIPs = append(serveIPs, o.podAPIAddr)
	}
	serveCert, serveKey, err := e.pki.issue("kube-apiserver", nil, serveIPs,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return fmt.Errorf("k8senv: serving certificate: %w", err)
	}
	caPath := filepath.Join(pkiDir, "ca.crt")
	certPath := filepath.Join(pkiDir, "apiserver.crt")
	keyPath := filepath.Join(pkiDir, "apiserver.key")
	if err := writeFiles(map[string][]byte{caPath: e.pki.caPEM, certPath: serveCert, keyPath: serveKey}); err != nil {
		return err
	}
	saKey, saPub, err := writeServiceAccountKey(pkiDir)
	if err != nil {
		return fmt.Errorf("k8senv: service-account key: %w", err)
	}
	adminCert, adminKey, err := e.pki.issue("k8senv-admin", []string{"system:masters"}, nil, nil)
	if err != nil {
		return fmt.Errorf("k8senv: admin certificate: %w", err)
	}

	if err := e.startRetrying(func() (*Proc, error) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		e.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(port)
		e.Config = &rest.Config{
			Host: e.APIServerURL,
			TLSClientConfig: rest.TLSClientConfig{
				CAData:   e.pki.caPEM,
				CertData: adminCert,
				KeyData:  adminKey,
			},
			QPS:   100,
			Burst: 200,
		}
		if e.Client, err = kubernetes.NewForConfig(e.Config); err != nil {
			return nil, fmt.Errorf("k8senv: client: %w", err)
		}
		args := []string{
			"--etcd-servers=" + e.EtcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + pkiDir,
			"--tls-cert-file=" + certPath,
			"--tls-private-key-file=" + keyPath,
			"--client-ca-file=" + caPath,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + saPub,
			"--service-account-signing-key-file=" + saKey,
			"--service-cluster-ip-range=10.0.0.0/24",
			// RBAC only, so that the RBAC in gpud's manifests is what
			// decides; the admin is in system:masters.
			"--authorization-mode=RBAC",
			// Without a controller manager nobody creates the "default"
			// ServiceAccount (the ServiceAccount plugin would reject
			// every pod) or lifts the not-ready taint that
			// TaintNodesByCondition puts on new nodes.
			"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
			// gpud's DaemonSets are privileged.
			"--allow-privileged=true",
			"--runtime-config=" + DefaultRuntimeConfig,
			"--feature-gates=" + gateFlag(o.gates),
			// The default reconciler refuses a loopback advertise address;
			// nothing in the environment needs the "kubernetes" Service's
			// endpoints.
			"--endpoint-reconciler-type=none",
			"--profiling=false",
			"--v=1",
		}
		if o.podAPIAddr != nil {
			// Pods reach the server through the node's gateway, not
			// loopback; their tokens need ServiceAccount admission.
			args = mergeFlags(args, []string{"--bind-address=0.0.0.0", "--disable-admission-plugins=TaintNodesByCondition"})
		}
		args = mergeFlags(args, o.apiServerFlags)
		e.apiServerStart = func() (*Proc, error) {
			p, err := startProc(e.Dir, "kube-apiserver", e.Binaries.APIServer, args)
			if err != nil {
				return nil, err
			}
			rt, err := rest.TransportFor(e.Config)
			if err != nil {
				return p, fmt.Errorf("k8senv: transport: %w", err)
			}
			hc := &http.Client{Transport: rt, Timeout: 5 * time.Second}
			return p, waitFor(p, "kube-apiserver "+e.APIServerURL+"/readyz", o.timeout, func() error {
				return getOK(hc, e.APIServerURL+"/readyz?verbose")
			})
		}
		p, err := e.apiServerStart()
		e.apiServer = p
		if err != nil {
			return p, err
		}
		// The system namespaces controller creates "default" shortly
		// after the server is ready; tests use it right away.
		return p, waitFor(p, `kube-apiserver to create namespace "default"`, o.timeout, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := e.Client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
			return err
		})
	}); err != nil {
		return err
	}
	e.Kubeconfig = filepath.Join(e.Dir, "admin.kubeconfig")
	return writeKubeconfig(e.Kubeconfig, e.Config)
}

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after 10 s):
// clients see refused connections until StartAPIServer. etcd keeps the
// cluster's state.
func (e *Env) StopAPIServer(t testing.TB) {
	t.Helper()
	if e.apiServer == nil {
		t.Fatal("k8senv: no kube-apiserver to stop")
	}
	e.apiServer.Stop(10 * time.Second)
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same address with the same flags, and returns once it is ready.
func (e *Env) StartAPIServer(t testing.TB) {
	t.Helper()
	if e.apiServer == nil || !e.apiServer.exited() {
		t.Fatal("k8senv: StartAPIServer without StopAPIServer")
	}
	p, err := e.apiServerStart()
	if p != nil {
		e.procs = append(e.procs, p)
		e.apiServer = p
	}
	if err != nil {
		t.Fatalf("k8senv: restart kube-apiserver: %v", err)
	}
}

func (e *Env) startScheduler(o *options) error {
	confPath := filepath.Join(e.Dir, "kube-scheduler.yaml")
	conf := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: 100
  burst: 200
leaderElection:
  leaderElect: false
# Retry unschedulable pods quickly: tests create the objects a pod waits
# for (nodes, slices) in any order.
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 2
`, e.Kubeconfig)
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	certDir := filepath.Join(e.Dir, "kube-scheduler-certs")
	return e.startRetrying(func() (*Proc, error) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		args := []string{
			"--config=" + confPath,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + certDir,
			"--feature-gates=" + gateFlag(o.gates),
			"--v=2",
		}
		p, err := startProc(e.Dir, "kube-scheduler", e.Binaries.Scheduler, mergeFlags(args, o.schedulerFlags))
		if err != nil {
			return nil, err
		}
		// /readyz is always allowed, and includes the scheduler's
		// informer sync; its certificate is self-signed.
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback, the scheduler's own self-signed cert
		}}
		url := fmt.Sprintf("https://127.0.0.1:%d/readyz?verbose", port)
		return p, waitFor(p, "kube-scheduler "+url, o.timeout, func() error { return getOK(hc, url) })
	})
}

func getOK(hc *http.Client, url string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	// Keep the failing checks only ("[-]poststarthook/... failed").
	var failing []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "[-]") {
			failing = append(failing, line)
		}
	}
	if len(failing) == 0 {
		failing = []string{strings.TrimSpace(string(body))}
	}
	return fmt.Errorf("%s: %s", resp.Status, strings.Join(failing, "; "))
}

// mergeFlags returns base with each of extra ("--name=value" or "--name")
// replacing the flag of the same name, or appended when base has none:
// list-valued flags such as --authorization-mode would otherwise add up.
func mergeFlags(base, extra []string) []string {
	out := slices.Clone(base)
	name := func(f string) string { n, _, _ := strings.Cut(f, "="); return n }
	for _, f := range extra {
		i := slices.IndexFunc(out, func(b string) bool { return name(b) == name(f) })
		if i >= 0 {
			out[i] = f
		} else {
			out = append(out, f)
		}
	}
	return out
}

func gateFlag(gates map[string]bool) string {
	names := make([]string, 0, len(gates))
	for k := range gates {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = k + "=" + strconv.FormatBool(gates[k])
	}
	return strings.Join(parts, ",")
}

// writeKubeconfig writes cfg (client certificate or bearer token) as a
// self-contained kubeconfig.
func writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["k8senv"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["k8senv"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
	}
	kc.Contexts["k8senv"] = &clientcmdapi.Context{Cluster: "k8senv", AuthInfo: "k8senv"}
	kc.CurrentContext = "k8senv"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("k8senv: write kubeconfig: %w", err)
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig for cfg (for instance from UserConfig
// or ServiceAccountConfig) into the environment's directory and returns its
// path, for a gpud process started with --kubeconfig.
func (e *Env) WriteKubeconfig(t testing.TB, name string, cfg *rest.Config) string {
	t.Helper()
	path := filepath.Join(e.Dir, name+".kubeconfig")
	if err := writeKubeconfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	return path
}

// UserConfig is a client configuration for user in groups, authenticated by
// a client certificate from the environment's CA; what it may do is up to
// RBAC.
func (e *Env) UserConfig(t testing.TB, user string, groups ...string) *rest.Config {
	t.Helper()
	cert, key, err := e.pki.issue(user, groups, nil, nil)
	if err != nil {
		t.Fatalf("k8senv: certificate for %s: %v", user, err)
	}
	cfg := rest.CopyConfig(e.Config)
	cfg.CertData, cfg.KeyData = cert, key
	return cfg
}

// ServiceAccountConfig is a client configuration that authenticates as
// ServiceAccount namespace/name (created when missing) with a token from
// the TokenRequest API, as a pod of a DaemonSet running under it would.
func (e *Env) ServiceAccountConfig(t testing.TB, namespace, name string) *rest.Config {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := e.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("k8senv: create ServiceAccount %s/%s: %v", namespace, name, err)
	}
	expiry := int64(24 * 3600)
	tr, err := e.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("k8senv: token for ServiceAccount %s/%s: %v", namespace, name, err)
	}
	cfg := rest.CopyConfig(e.Config)
	cfg.CertData, cfg.KeyData = nil, nil
	cfg.BearerToken = tr.Status.Token
	return cfg
}
