package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/internal/manifest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/test/k8senv"
)

// The DRA end-to-end tests run `gpud agent --kubelet-api dra` against a
// real kube-apiserver and kube-scheduler (test/k8senv), let the upstream
// scheduler allocate claims from gpud's ResourceSlices and bind pods, and
// then act as the kubelet over its real gRPC APIs.

const (
	draDriver  = "gpu.gpud.io"
	draTimeout = 90 * time.Second
)

// draCase is one simulated node and the MIG profile its dynamic MIG claim
// asks for.
type draCase struct {
	profile string
	migProf string
	// extra agent flags (the A100 needs MIG mode on first: turning it on
	// takes a GPU reset, which prepare cannot do).
	extra func(t *testing.T, dir string) []string
}

func TestDRAEndToEnd(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver, kube-scheduler and the gpud binary")
	}
	for _, tc := range []draCase{
		{profile: "dgx-h100", migProf: "1g.10gb"},
		{profile: "dgx-a100", migProf: "1g.5gb", extra: func(t *testing.T, dir string) []string {
			// GPUs 0 and 1 in MIG mode without slices (reset at start,
			// as an operator would): DRA creates slices on them.
			layouts := filepath.Join(dir, "layouts.yaml")
			data := "version: v1\nmig-configs:\n  dra:\n    - devices: [0, 1]\n      mig-enabled: true\n      mig-devices: {}\n"
			if err := os.WriteFile(layouts, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"--mig-config-file", layouts, "--mig-config", "dra", "--mig-reset-gpus"}
		}},
	} {
		t.Run(tc.profile, func(t *testing.T) { runDRACase(t, tc) })
	}
}

func runDRACase(t *testing.T, tc draCase) {
	begin := time.Now()
	bin := buildGpud(t)
	env := k8senv.Start(t)
	c := env.Client
	node := tc.profile
	env.CreateNode(t, node, nil)

	dir := shortDir(t)
	agentCfg := draAgentConfig(t, env, node)
	kubeconfig := env.WriteKubeconfig(t, "gpud-dra", agentCfg)
	pluginsDir, registryDir, cdiDir := filepath.Join(dir, "plugins"), filepath.Join(dir, "registry"), filepath.Join(dir, "cdi")
	if err := os.MkdirAll(registryDir, 0o755); err != nil { // the kubelet's
		t.Fatal(err)
	}
	addr := k8senv.FreeAddr(t)
	args := []string{"--kubelet-api", "dra", "--simulate", tc.profile, "--node-name", node, "--kubeconfig", kubeconfig,
		"--kubelet-plugins-dir", pluginsDir, "--kubelet-registry-dir", registryDir, "--cdi-dir", cdiDir,
		"--http-addr", addr, "--log-level", "debug"}
	// As root, the simulated node owns fake device files, and the claims'
	// CDI specs name them; otherwise the specs name none (no file exists).
	simDev := os.Geteuid() == 0
	if simDev {
		args = append(args, "--sim-dev-root", filepath.Join(dir, "dev"))
	}
	if tc.extra != nil {
		args = append(args, tc.extra(t, dir)...)
	}
	agentStart := time.Now()
	startAgent(t, bin, dir, args...)

	// The slices: every GPU, and dynamic MIG placements of the profile.
	var devices map[string]resourceapi.Device
	testwait.For(t, draTimeout, "gpud's ResourceSlices with 8 GPUs and "+tc.migProf+" placements", func() bool {
		devices = draDevices(t, env, node)
		gpus, migs := 0, 0
		for _, d := range devices {
			switch draAttr(d, "type") {
			case "gpu":
				gpus++
			case "mig":
				if draAttr(d, "profile") == tc.migProf {
					migs++
				}
			}
		}
		want := 8
		if tc.extra != nil {
			want = 6 // GPUs 0 and 1 are in MIG mode
		}
		return gpus == want && migs > 0
	})
	published := time.Since(agentStart)
	t.Logf("%s: %d devices published by gpud, %s after the agent started", node, len(devices), published.Round(time.Millisecond))
	// Ready once the agent itself found its slices in the API server (with
	// the DaemonSet's RBAC: list by driver and node field selectors).
	testwait.For(t, draTimeout, "the agent's /readyz 200 once its slices are published", func() bool {
		return httpOK("http://" + addr + "/readyz")
	})
	t.Logf("%s: /readyz ready %s after the agent started", node, time.Since(agentStart).Round(time.Millisecond))

	// The agent's identity may not write another node's slices.
	agentClient, err := kubernetes.NewForConfig(agentCfg)
	if err != nil {
		t.Fatal(err)
	}
	foreign := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "foreign"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: draDriver, NodeName: ptr.To("other-node"), Pool: resourceapi.ResourcePool{Name: "other-node", ResourceSliceCount: 1}}}
	if _, err := agentClient.ResourceV1().ResourceSlices().Create(t.Context(), foreign, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "may not change ResourceSlices of node 'other-node'") {
		t.Errorf("the agent's identity creating a slice of another node: %v, want the admission policy's refusal", err)
	}

	// DeviceClasses, as shipped.
	createDeviceClasses(t, c)

	// Claims and pods from deploy/dra/examples (no controller manager here
	// to expand the templates: each becomes a claim created by name).
	type request struct {
		example, name string
	}
	reqs := []request{
		{"whole-gpu", "whole-gpu"},
		{"fraction-20gi", "fraction-a"},
		{"fraction-20gi", "fraction-b"},
		{"mig-1g10gb", "mig"},
		{"two-gpus-nvlink", "two-gpus-nvlink"},
	}
	for _, r := range reqs {
		claim, pod := draExample(t, r.example, r.name)
		if r.example == "mig-1g10gb" {
			sel := &claim.Spec.Devices.Requests[0].Exactly.Selectors[0].CEL.Expression
			*sel = strings.ReplaceAll(*sel, "1g.10gb", tc.migProf)
		}
		if _, err := c.ResourceV1().ResourceClaims(claim.Namespace).Create(t.Context(), claim, metav1.CreateOptions{}); err != nil {
			t.Fatalf("claim %s: %v", claim.Name, err)
		}
		if _, err := c.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("pod %s: %v", pod.Name, err)
		}
	}
	claims := map[string]*resourceapi.ResourceClaim{}
	for _, r := range reqs {
		if got := env.WaitForPodBound(t, metav1.NamespaceDefault, r.name, draTimeout); got != node {
			t.Fatalf("pod %s bound to %q, want %s", r.name, got, node)
		}
		rc, err := c.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Get(t.Context(), r.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rc.Status.Allocation == nil {
			t.Fatalf("claim %s bound but not allocated", r.name)
		}
		claims[r.name] = rc
		for _, res := range rc.Status.Allocation.Devices.Results {
			if res.Driver != draDriver || res.Pool != node {
				t.Errorf("claim %s: device %s from driver %s pool %s, want %s/%s", r.name, res.Device, res.Driver, res.Pool, draDriver, node)
			}
			t.Logf("%s: claim %s -> %s%s", node, r.name, res.Device, draConsumed(res))
		}
	}
	bound := time.Since(agentStart)

	// What the scheduler chose.
	one := func(name string) resourceapi.DeviceRequestAllocationResult {
		rs := claims[name].Status.Allocation.Devices.Results
		if len(rs) != 1 {
			t.Fatalf("claim %s: %d devices, want 1", name, len(rs))
		}
		return rs[0]
	}
	w := one("whole-gpu")
	if d := devices[w.Device]; draAttr(d, "type") != "gpu" {
		t.Errorf("whole-gpu got %s, want a whole GPU", w.Device)
	} else if q, ok := w.ConsumedCapacity["memory"]; ok {
		all := d.Capacity["memory"].Value
		if q.Cmp(all) != 0 {
			t.Errorf("whole-gpu consumed %s of %s, want all of it", q.String(), all.String())
		}
	}
	for _, f := range []string{"fraction-a", "fraction-b"} {
		r := one(f)
		if q := r.ConsumedCapacity["memory"]; q.String() != "20Gi" || r.ShareID == nil {
			t.Errorf("%s: device %s consumed %v share %v, want 20Gi with a share ID", f, r.Device, r.ConsumedCapacity, r.ShareID)
		}
	}
	m := one("mig")
	if d := devices[m.Device]; draAttr(d, "type") != "mig" || draAttr(d, "profile") != tc.migProf {
		t.Errorf("mig claim got %s, want a %s placement", m.Device, tc.migProf)
	}
	pair := claims["two-gpus-nvlink"].Status.Allocation.Devices.Results
	if len(pair) != 2 || pair[0].Device == pair[1].Device ||
		draAttr(devices[pair[0].Device], "nvlinkDomain") == "" || draAttr(devices[pair[0].Device], "nvlinkDomain") != draAttr(devices[pair[1].Device], "nvlinkDomain") {
		t.Errorf("two-gpus-nvlink got %v, want two GPUs of one nvlinkDomain", pair)
	}

	// The kubelet's side: registration, then prepare each claim.
	reg := registerapi.NewRegistrationClient(draDial(t, filepath.Join(registryDir, draDriver+"-reg.sock")))
	info, err := reg.GetInfo(t.Context(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != draDriver || info.Endpoint != filepath.Join(pluginsDir, draDriver, "dra.sock") ||
		!slices.Contains(info.SupportedVersions, drapb.DRAPluginService) {
		t.Fatalf("GetInfo = %+v", info)
	}
	if _, err := reg.NotifyRegistrationStatus(t.Context(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}
	kubelet := drapb.NewDRAPluginClient(draDial(t, info.Endpoint))
	prepStart := time.Now()
	var req []*drapb.Claim
	for _, r := range reqs {
		rc := claims[r.name]
		req = append(req, &drapb.Claim{Namespace: rc.Namespace, Name: rc.Name, Uid: string(rc.UID)})
	}
	resp, err := kubelet.NodePrepareResources(t.Context(), &drapb.NodePrepareResourcesRequest{Claims: req})
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	prepared := time.Since(prepStart)
	for _, r := range reqs {
		rc := claims[r.name]
		got := resp.Claims[string(rc.UID)]
		if got == nil || got.Error != "" {
			t.Fatalf("prepare %s: %+v", r.name, got)
		}
		var want, ids []string
		for _, res := range rc.Status.Allocation.Devices.Results {
			name := string(rc.UID) + "-" + res.Device
			if res.ShareID != nil {
				name += "-" + string(*res.ShareID)
			}
			want = append(want, "k8s.gpu.gpud.io/claim="+name)
		}
		for _, d := range got.Devices {
			ids = append(ids, d.CdiDeviceIds...)
		}
		slices.Sort(want)
		slices.Sort(ids)
		if !slices.Equal(ids, want) {
			t.Errorf("prepare %s: CDI devices %v, want %v", r.name, ids, want)
		}
		spec := draCDISpec(t, cdiDir, string(rc.UID))
		t.Logf("%s: prepared %s: %v", node, r.name, ids)
		if strings.HasPrefix(r.name, "fraction") && !strings.Contains(spec, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M") {
			t.Errorf("CDI spec of %s lacks the 20Gi MPS limit:\n%s", r.name, spec)
		}
		switch {
		case simDev && r.name == "mig" && !strings.Contains(spec, `"hostPath":"`+filepath.Join(dir, "dev", "nvidia-caps")):
			t.Errorf("CDI spec of the MIG claim names no nvidia-caps node under --sim-dev-root:\n%s", spec)
		case simDev && !strings.Contains(spec, `"hostPath":"`+filepath.Join(dir, "dev", "nvidia")):
			t.Errorf("CDI spec of %s names no device file under --sim-dev-root:\n%s", r.name, spec)
		case !simDev && strings.Contains(spec, `"deviceNodes"`):
			t.Errorf("CDI spec of %s names device files a simulated node without --sim-dev-root lacks:\n%s", r.name, spec)
		}
	}

	// The MIG slice exists on the simulated GPU, as /inventory shows.
	parent, start := int(*devices[m.Device].Attributes["parentIndex"].IntValue), int(*devices[m.Device].Attributes["placementStart"].IntValue)
	var created gpu.MIGDevice
	testwait.For(t, draTimeout, fmt.Sprintf("a %s MIG device at %d on GPU %d in /inventory", tc.migProf, start, parent), func() bool {
		d, ok := draInventoryMIG(t, addr, parent, tc.migProf, start)
		created = d
		return ok
	})
	t.Logf("%s: prepare created MIG device %s (%s at %d on GPU %d, GI %d CI %d)", node, created.UUID, created.Profile, start, parent, created.GPUInstanceID, created.ComputeInstanceID)
	// The slices follow: the device is published as existing, with its UUID.
	testwait.For(t, draTimeout, "the slices to publish "+m.Device+" with the created MIG UUID", func() bool {
		return draAttr(draDevices(t, env, node)[m.Device], "uuid") == created.UUID
	})
	// The change is an Event on the Node, written with the agent's own
	// identity (deploy/dra/rbac.yaml grants events.k8s.io).
	testwait.For(t, draTimeout, "a MIGLayoutChanged Event on the node naming "+tc.migProf, func() bool {
		evs, err := c.EventsV1().Events("").List(t.Context(), metav1.ListOptions{FieldSelector: "regarding.kind=Node,regarding.name=" + node})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Reason == "MIGLayoutChanged" && e.ReportingController == "gpud-agent" && e.ReportingInstance == node && strings.Contains(e.Note, tc.migProf+"×1") {
				return true
			}
		}
		return false
	})

	// Prepare again: the same devices.
	again, err := kubelet.NodePrepareResources(t.Context(), &drapb.NodePrepareResourcesRequest{Claims: req})
	if err != nil {
		t.Fatalf("second NodePrepareResources: %v", err)
	}
	for uid, r := range resp.Claims {
		if a := again.Claims[uid]; a == nil || a.Error != "" || len(a.Devices) != len(r.Devices) {
			t.Errorf("second prepare of %s: %+v, want %+v", uid, a, r)
		}
	}

	// Unprepare: CDI specs removed and the MIG slice destroyed.
	un, err := kubelet.NodeUnprepareResources(t.Context(), &drapb.NodeUnprepareResourcesRequest{Claims: req})
	if err != nil {
		t.Fatalf("NodeUnprepareResources: %v", err)
	}
	for uid, r := range un.Claims {
		if r.Error != "" {
			t.Errorf("unprepare %s: %s", uid, r.Error)
		}
	}
	for _, r := range reqs {
		if _, err := os.Stat(filepath.Join(cdiDir, "gpud-dra-"+string(claims[r.name].UID)+".json")); !os.IsNotExist(err) {
			t.Errorf("CDI spec of %s left after unprepare: %v", r.name, err)
		}
	}
	testwait.For(t, draTimeout, "the MIG device gone from /inventory after unprepare", func() bool {
		_, ok := draInventoryMIG(t, addr, parent, tc.migProf, start)
		return !ok
	})
	// The slices follow again: the placement is offered as before, and a
	// GPU whose MIG mode prepare turned on is a whole GPU again.
	wholeAgain := tc.extra == nil
	testwait.For(t, draTimeout, "the slices to offer "+m.Device+" as a placement again", func() bool {
		ds := draDevices(t, env, node)
		d, ok := ds[m.Device]
		_, whole := ds[fmt.Sprintf("gpu-%d", parent)]
		return ok && draAttr(d, "uuid") == "" && whole == wholeAgain
	})
	t.Logf("%s: timings from the agent's start: slices published %s, 5 pods bound %s; 5 claims prepared in %s; test total %s",
		node, published.Round(time.Millisecond), bound.Round(time.Millisecond), prepared.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
}

// applyRBAC creates the gpud namespace and the identity a shipped rbac.yaml
// (deploy/dra's, deploy/scheduler's) makes: service accounts, cluster roles
// and roles with their bindings, and admission policies with theirs.
func applyRBAC(t *testing.T, env *k8senv.Env, path string) {
	t.Helper()
	c := env.Client
	ctx := t.Context()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpud"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, obj := range draManifests(t, path) {
		var err error
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = c.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = c.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicy:
			_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("%s: unexpected %T", path, obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s %T: %v", path, obj, err)
		}
	}
}

// draAgentConfig is the agent's identity as deploy/dra/rbac.yaml makes it:
// the gpud-dra service account with its ClusterRole and the admission
// policy that limits it to its own node's slices, its token bound to a pod
// on the node (so it carries the node name, as the DaemonSet's pod does).
func draAgentConfig(t *testing.T, env *k8senv.Env, node string) *rest.Config {
	t.Helper()
	applyRBAC(t, env, "../deploy/dra/rbac.yaml")
	c := env.Client
	ctx := t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gpud", Name: "gpud-dra-" + node},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "gpud-dra", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "gpud", Image: "ghcr.io/gpud/gpud:test"}}},
	}
	pod, err := c.CoreV1().Pods("gpud").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("agent pod: %v", err)
	}
	tr, err := c.CoreV1().ServiceAccounts("gpud").CreateToken(ctx, "gpud-dra", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(3600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for gpud-dra: %v", err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.CertData, cfg.KeyData = nil, nil
	cfg.BearerToken = tr.Status.Token
	waitForAgentPolicy(t, cfg, node)
	return cfg
}

// waitForAgentPolicy waits until the API server enforces deploy/dra's RBAC
// and admission policies for the agent's identity: the policies reach
// admission through informers, a moment after they are created. The probe
// is a dry run, so it changes nothing: the agent's identity setting a label
// outside nvidia.com/ and gpud.io/ on its own node must be refused by the
// policy (not by RBAC, and not accepted).
func waitForAgentPolicy(t *testing.T, cfg *rest.Config, node string) {
	t.Helper()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const refusal = "only nvidia.com/ and gpud.io/ labels"
	patch := []byte(`{"metadata":{"labels":{"example.com/policy-probe":"x"}}}`)
	testwait.ForErr(t, draTimeout, "deploy/dra's RBAC and admission policies enforced for the agent's identity", func() error {
		_, err := client.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil:
			return errors.New("a foreign label was accepted: the policy is not in effect yet")
		case !strings.Contains(err.Error(), refusal):
			return err
		}
		return nil
	})
}

// draManifests decodes the documents of a manifest file into API types
// (strictly, through internal/manifest).
func draManifests(t *testing.T, path string) []any {
	t.Helper()
	docs, err := manifest.DecodeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]any, len(docs))
	for i, d := range docs {
		out[i] = d.Object
	}
	return out
}

// draExample turns deploy/dra/examples/<example>.yaml into a claim and a
// pod named name, the pod using the claim by name.
func draExample(t *testing.T, example, name string) (*resourceapi.ResourceClaim, *corev1.Pod) {
	t.Helper()
	var claim *resourceapi.ResourceClaim
	var pod *corev1.Pod
	for _, obj := range draManifests(t, "../deploy/dra/examples/"+example+".yaml") {
		switch o := obj.(type) {
		case *resourceapi.ResourceClaimTemplate:
			claim = &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}, Spec: o.Spec.Spec}
		case *corev1.Pod:
			pod = o
		}
	}
	if claim == nil || pod == nil || len(pod.Spec.ResourceClaims) != 1 {
		t.Fatalf("example %s: want a ResourceClaimTemplate and a Pod with one claim", example)
	}
	pod.Name, pod.Namespace = name, metav1.NamespaceDefault
	pod.Spec.ResourceClaims[0].ResourceClaimTemplateName = nil
	pod.Spec.ResourceClaims[0].ResourceClaimName = ptr.To(name)
	return claim, pod
}

// createDeviceClasses creates gpud's DeviceClasses
// (deploy/dra/deviceclasses.yaml) through c.
func createDeviceClasses(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	for _, obj := range draManifests(t, "../deploy/dra/deviceclasses.yaml") {
		if dc, ok := obj.(*resourceapi.DeviceClass); ok {
			if _, err := c.ResourceV1().DeviceClasses().Create(t.Context(), dc, metav1.CreateOptions{}); err != nil {
				t.Fatalf("DeviceClass %s: %v", dc.Name, err)
			}
		}
	}
}

// waitGPUs waits up to timeout until gpud's ResourceSlices list want
// whole GPUs on each of nodes.
func waitGPUs(t *testing.T, env *k8senv.Env, timeout time.Duration, want int, nodes ...string) {
	t.Helper()
	for _, node := range nodes {
		testwait.For(t, timeout, fmt.Sprintf("%s: gpud's ResourceSlices with %d GPUs", node, want), func() bool {
			got := 0
			for _, d := range draDevices(t, env, node) {
				if draAttr(d, "type") == "gpu" {
					got++
				}
			}
			return got == want
		})
	}
}

// draDevices lists the devices of gpud's slices for node.
func draDevices(t *testing.T, env *k8senv.Env, node string) map[string]resourceapi.Device {
	t.Helper()
	list, err := env.Client.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]resourceapi.Device{}
	for _, s := range list.Items {
		if s.Spec.Driver != draDriver || s.Spec.Pool.Name != node {
			continue
		}
		for _, d := range s.Spec.Devices {
			out[d.Name] = d
		}
	}
	return out
}

func draAttr(d resourceapi.Device, name resourceapi.QualifiedName) string {
	a, ok := d.Attributes[name]
	switch {
	case !ok:
		return ""
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue)
	case a.VersionValue != nil:
		return *a.VersionValue
	}
	return ""
}

func draConsumed(r resourceapi.DeviceRequestAllocationResult) string {
	if len(r.ConsumedCapacity) == 0 {
		return ""
	}
	var parts []string
	for k, v := range r.ConsumedCapacity {
		parts = append(parts, fmt.Sprintf("%s=%s", k, v.String()))
	}
	slices.Sort(parts)
	share := ""
	if r.ShareID != nil {
		share = " share " + string(*r.ShareID)
	}
	return " (" + strings.Join(parts, ", ") + share + ")"
}

func draDial(t *testing.T, path string) *grpc.ClientConn {
	t.Helper()
	testwait.For(t, draTimeout, "socket "+path, func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func draCDISpec(t *testing.T, dir, uid string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "gpud-dra-"+uid+".json"))
	if err != nil {
		t.Fatalf("CDI spec of claim %s: %v", uid, err)
	}
	return string(data)
}

// draInventoryMIG finds a MIG device of profile at start on GPU index in
// the agent's /inventory.
func draInventoryMIG(t *testing.T, addr string, index int, profile string, start int) (gpu.MIGDevice, bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/inventory")
	if err != nil {
		return gpu.MIGDevice{}, false
	}
	defer resp.Body.Close()
	var inv gpu.Inventory
	if err := json.NewDecoder(resp.Body).Decode(&inv); err != nil {
		t.Fatalf("/inventory: %v", err)
	}
	for _, g := range inv.GPUs {
		if g.Index != index {
			continue
		}
		for _, d := range g.MIGDevices {
			if d.Profile == profile && d.PlacementStart == start {
				return d, true
			}
		}
	}
	return gpu.MIGDevice{}, false
}
