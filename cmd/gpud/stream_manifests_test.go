package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpud/gpud/internal/manifest"
)

// patched applies the JSON patch file (YAML) to the first object of kind
// in the manifest and decodes the result strictly.
func patched[T any](t *testing.T, manifestPath, patchPath string) *T {
	t.Helper()
	objs, err := manifest.DecodeFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if _, ok := any(o.Object).(*T); !ok {
			continue
		}
		var v T
		if err := manifest.PatchFile(o.Object, patchPath, &v); err != nil {
			t.Fatalf("%s: %v", manifestPath, err)
		}
		return &v
	}
	t.Fatalf("%s has no %T", manifestPath, new(T))
	return nil
}

// TestSchedulerTelemetryOverlay applies deploy/scheduler/telemetry's
// patch to the Deployment and parses the args with the real flags: the
// listener gets mutual TLS from the mounted Secret.
func TestSchedulerTelemetryOverlay(t *testing.T) {
	d := patched[appsv1.Deployment](t, "../../deploy/scheduler/deployment.yaml", "../../deploy/scheduler/telemetry/deployment-patch.yaml")
	c := d.Spec.Template.Spec.Containers[0]
	o, _, _, err := parseSchedulerFlags(c.Args[1:], "gpud", io.Discard)
	if err != nil {
		t.Fatalf("patched args %v: %v", c.Args, err)
	}
	if o.telemetry.addr != "0.0.0.0:9403" || o.telemetry.insecure || o.telemetry.tls.CA != "/etc/gpud/tls/ca.crt" {
		t.Errorf("telemetry options %+v", o.telemetry)
	}
	checkTLSMount(t, d.Spec.Template.Spec, c, "gpud-scheduler-tls", o.telemetry.tls.Cert)
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "telemetry" && p.ContainerPort == 9403 }) {
		t.Errorf("no telemetry port in %v", c.Ports)
	}
	objs, err := manifest.DecodeFile("../../deploy/scheduler/telemetry/service.yaml")
	if err != nil {
		t.Fatal(err)
	}
	svc := objs[0].Object.(*corev1.Service)
	if svc.Spec.PublishNotReadyAddresses || svc.Spec.Ports[0].TargetPort.StrVal != "telemetry" || svc.Spec.Selector["app.kubernetes.io/name"] != "gpud-scheduler" {
		t.Errorf("telemetry Service %+v: want the ready (leading) scheduler's telemetry port", svc.Spec)
	}
}

// TestAgentStreamPatch applies deploy/daemonset/stream's patch to the
// DaemonSet and parses the agent's args with the real flags.
func TestAgentStreamPatch(t *testing.T) {
	d := patched[appsv1.DaemonSet](t, "../../deploy/daemonset/daemonset.yaml", "../../deploy/daemonset/stream/daemonset-patch.yaml")
	c := d.Spec.Template.Spec.Containers[0]
	fs, cfg := agentFlagSet(io.Discard)
	if err := fs.Parse(c.Args[1:]); err != nil {
		t.Fatalf("patched args %v: %v", c.Args, err)
	}
	if errs := cfg.telemetry.stream.validate(); len(errs) > 0 {
		t.Fatalf("stream flags: %v", errs)
	}
	if cfg.telemetry.stream.addr != "gpud-scheduler-telemetry.gpud.svc:9403" || cfg.telemetry.stream.tls.Cert != "/etc/gpud-tls/tls.crt" {
		t.Errorf("stream options %+v", cfg.telemetry.stream)
	}
	checkTLSMount(t, d.Spec.Template.Spec, c, "gpud-agent-tls", "/etc/gpud-tls/tls.crt")

	// The node is proven by the pod's own token: a projected
	// ServiceAccount token for the audience the scheduler checks, of the
	// ServiceAccount the scheduler accepts, at --stream-token-file.
	sched := patched[appsv1.Deployment](t, "../../deploy/scheduler/deployment.yaml", "../../deploy/scheduler/telemetry/deployment-patch.yaml")
	so, _, _, err := parseSchedulerFlags(sched.Spec.Template.Spec.Containers[0].Args[1:], "gpud", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var tokenVol string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if st := src.ServiceAccountToken; st != nil {
				tokenVol = v.Name
				if st.Audience != so.telemetry.audience || st.ExpirationSeconds == nil || *st.ExpirationSeconds < 600 || *st.ExpirationSeconds > 3600 {
					t.Errorf("projected token audience %q, expiry %v: want the scheduler's --telemetry-token-audience %q, 10m to 1h", st.Audience, st.ExpirationSeconds, so.telemetry.audience)
				}
				if want := "/" + st.Path; !strings.HasSuffix(cfg.telemetry.stream.tokenFile, want) {
					t.Errorf("--stream-token-file %s is not the projected token's path %s", cfg.telemetry.stream.tokenFile, st.Path)
				}
			}
		}
	}
	if tokenVol == "" {
		t.Fatal("no projected ServiceAccount token volume")
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == tokenVol && m.ReadOnly && strings.HasPrefix(cfg.telemetry.stream.tokenFile, m.MountPath+"/")
	}) {
		t.Errorf("the token volume %s is not mounted read-only above --stream-token-file %s", tokenVol, cfg.telemetry.stream.tokenFile)
	}
	if sa := d.Namespace + "/" + d.Spec.Template.Spec.ServiceAccountName; !slices.Contains(splitList(so.telemetry.agentSAs), sa) {
		t.Errorf("the scheduler accepts tokens of %s, the agents run as %s", so.telemetry.agentSAs, sa)
	}
	for _, m := range c.VolumeMounts {
		if m.Name != "telemetry-tls" && strings.HasPrefix("/etc/gpud-tls/", m.MountPath+"/") {
			t.Errorf("the TLS mount nests in mount %s (%s): the kubelet cannot create it in a read-only volume", m.Name, m.MountPath)
		}
	}
}

func checkTLSMount(t *testing.T, spec corev1.PodSpec, c corev1.Container, secret, certPath string) {
	t.Helper()
	var vol string
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret {
			vol = v.Name
		}
	}
	if vol == "" {
		t.Fatalf("no volume of Secret %s", secret)
	}
	for _, m := range c.VolumeMounts {
		if m.Name == vol && m.ReadOnly && len(certPath) > len(m.MountPath) && certPath[:len(m.MountPath)+1] == m.MountPath+"/" {
			return
		}
	}
	t.Errorf("Secret %s is not mounted read-only above %s", secret, certPath)
}
