package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/gpud/gpud/internal/manifest"
)

func TestSchedulerFlags(t *testing.T) {
	dir := t.TempDir()
	queues := filepath.Join(dir, "queues.yaml")
	if err := os.WriteFile(queues, []byte("queues:\n  - name: a\n  - name: b\n    parent: a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badQueues := filepath.Join(dir, "bad.yaml")
	models, badModels := filepath.Join(dir, "models.csv"), filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(models, []byte("model,price_per_gpu_hour\nH100,2.5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(badModels, []byte("model,busy_w\nH100,-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(badQueues, []byte("queues:\n  - name: a\n    parent: nowhere\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  string // POD_NAMESPACE
		want string // "" valid; else a substring of the error
	}{
		{name: "defaults"},
		{name: "all set", args: []string{"--scheduler-name", "gpu-sched", "--policy", "FGD", "--queues", queues, "--metrics-addr", "127.0.0.1:0",
			"--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "500ms"}},
		{name: "no leader election ignores lease flags", args: []string{"--leader-elect=false", "--leader-elect-namespace", "Bad_NS"}},
		{name: "bad policy", args: []string{"--policy", "best"}, want: `--policy: "best": want one of`},
		{name: "bad name", args: []string{"--scheduler-name", "Gpud Scheduler"}, want: "--scheduler-name"},
		{name: "missing queue file", args: []string{"--queues", filepath.Join(dir, "none.yaml")}, want: "--queues"},
		{name: "bad queue file", args: []string{"--queues", badQueues}, want: "bad.yaml:3"},
		{name: "no metrics addr", args: []string{"--metrics-addr", ""}, want: "--metrics-addr: empty"},
		{name: "bad metrics addr", args: []string{"--metrics-addr", "9402"}, want: "--metrics-addr"},
		{name: "renew not below lease", args: []string{"--leader-elect-lease-duration", "5s", "--leader-elect-renew-deadline", "5s"},
			want: "--leader-elect-renew-deadline: 5s: must be less than"},
		{name: "retry too long", args: []string{"--leader-elect-retry-period", "9s"}, want: "--leader-elect-retry-period"},
		{name: "bad lease namespace", args: []string{"--leader-elect-namespace", "Kube_System"}, want: "--leader-elect-namespace"},
		{name: "bad lease namespace from the pod", env: "Not_Valid", want: "--leader-elect-namespace"},
		{name: "bad kubeconfig", args: []string{"--kubeconfig", filepath.Join(dir, "none")}, want: "--kubeconfig"},
		{name: "bad log level", args: []string{"--log-level", "loud"}, want: "--log-level"},
		{name: "argument", args: []string{"extra"}, want: "unexpected argument"},
		{name: "bad qps", args: []string{"--kube-api-qps", "NaN"}, want: "--kube-api-qps"},
		{name: "bad burst", args: []string{"--kube-api-burst", "0"}, want: "--kube-api-burst"},
		{name: "telemetry with mutual TLS", args: []string{"--telemetry-addr", ":9403", "--tls-cert", "s.crt", "--tls-key", "s.key", "--tls-ca", "ca.crt", "--overcommit"}},
		{name: "telemetry insecure", args: []string{"--telemetry-addr", ":9403", "--telemetry-insecure"}},
		{name: "telemetry without TLS", args: []string{"--telemetry-addr", ":9403"}, want: "needs mutual TLS"},
		{name: "telemetry missing the CA", args: []string{"--telemetry-addr", ":9403", "--tls-cert", "s.crt", "--tls-key", "s.key"}, want: "--tls-ca is empty"},
		{name: "insecure and TLS", args: []string{"--telemetry-addr", ":9403", "--telemetry-insecure", "--tls-ca", "ca.crt"}, want: "--telemetry-insecure"},
		{name: "TLS without an address", args: []string{"--tls-ca", "ca.crt"}, want: "--telemetry-addr: empty"},
		{name: "bad telemetry addr", args: []string{"--telemetry-addr", "9403", "--telemetry-insecure"}, want: "--telemetry-addr"},
		{name: "bad overcommit margin", args: []string{"--overcommit-margin-percent", "95"}, want: "--overcommit-margin-percent"},
		{name: "learning off ignores its flags", args: []string{"--learn-runtimes=false", "--learn-runtimes-quantile", "2"}},
		{name: "bad learned quantile", args: []string{"--learn-runtimes-quantile", "1"}, want: "--learn-runtimes: quantile 1"},
		{name: "bad persist interval", args: []string{"--learn-runtimes-persist-interval", "500ms"}, want: "persist interval 500ms"},
		{name: "bad runtimes namespace from the lease's", args: []string{"--leader-elect-namespace", "Bad_NS"}, want: `--learn-runtimes: ConfigMap namespace "Bad_NS"`},
		{name: "bad runtimes namespace", args: []string{"--learn-runtimes-namespace", "Bad_NS"}, want: `--learn-runtimes: ConfigMap namespace "Bad_NS"`},
		{name: "gang topology labels", args: []string{"--gang-topology-labels", "example.com/pod, topology.kubernetes.io/region"}},
		{name: "bad gang topology label", args: []string{"--gang-topology-labels", "example.com/pod,not a label"}, want: `--gang-topology-labels: "not a label": not a label key`},
		{name: "bad usage quantile", args: []string{"--telemetry-addr", ":9403", "--telemetry-insecure", "--learn-usage-quantile", "1"}, want: "--learn-usage: quantile 1"},
		{name: "bad usage max keys", args: []string{"--telemetry-addr", ":9403", "--telemetry-insecure", "--learn-usage-max-keys", "-1"}, want: "--learn-usage: predict: invalid: max keys -1"},
		{name: "usage without a stream ignores its flags", args: []string{"--learn-usage-quantile", "2"}},
		{name: "usage off ignores its flags", args: []string{"--telemetry-addr", ":9403", "--telemetry-insecure", "--learn-usage=false", "--learn-usage-quantile", "2"}},
		{name: "heal home TTL", args: []string{"--heal-home-ttl", "30m"}},
		{name: "heal home TTL too long", args: []string{"--heal-home-ttl", "2h"}, want: "--heal-home-ttl: 2h0m0s: want 0 (the default, 10m0s) to 1h"},
		{name: "two errors at once", args: []string{"--policy", "x", "--resync-period", "1ms"}, want: "--resync-period"},
		{name: "objectives", args: []string{"--objectives", "energy=1,util=0.5", "--gpu-models", models}},
		{name: "objectives default", args: []string{"--objectives", "default"}},
		{name: "objectives sweep", args: []string{"--objectives", "util=1;energy=1"}, want: "--objectives: invalid objective: \"util=1;energy=1\": one setting only"},
		{name: "objectives unknown term", args: []string{"--objectives", "speed=1"}, want: `--objectives: line 1, setting "speed=1": invalid objective: unknown term "speed"`},
		{name: "objectives all zero", args: []string{"--objectives", "util=0"}, want: "every weight is 0"},
		{name: "missing GPU models", args: []string{"--gpu-models", filepath.Join(dir, "none.csv")}, want: "--gpu-models"},
		{name: "bad GPU models", args: []string{"--gpu-models", badModels}, want: "bad.csv:2: invalid objective: column busy_w"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, _, err := parseSchedulerFlags(tc.args, tc.env, io.Discard)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			_ = o
		})
	}
	o, qs, _, err := parseSchedulerFlags([]string{"--queues", queues}, "gpud", io.Discard)
	if err != nil || len(qs) != 2 || o.leaseNamespace != "gpud" || o.schedulerName != "gpud-scheduler" || o.policy != "gpud" || !o.leaderElect ||
		!o.learn.on || learnConfig(o).Namespace != "gpud" || o.learn.configMap != "gpud-scheduler-runtimes" || o.learn.quantile != 0.9 || o.learn.minSamples != 5 {
		t.Errorf("defaults: %+v, %d queues, %v", o, len(qs), err)
	}
	if ob := o.objectives.objective; ob == nil || ob.Util != 1 || ob.Fair != 1 || ob.Energy+ob.Cost+ob.Wait != 0 || o.objectives.models["H100"].BusyWatts != 700 {
		t.Errorf("objectives defaults: %+v, H100 %+v; want util=1,fair=1 (today's policy) and the built-in table", ob, o.objectives.models["H100"])
	}
	if u := usageConfig(o).ForUsage(); !o.learn.usage.on || learnUsage(o) || u.Name != "gpud-scheduler-usage" || u.Namespace != "gpud" || u.Quantile != 0.95 || u.MinSamples != 5 {
		t.Errorf("usage defaults: %+v (on %v, runs without a stream %v)", u, o.learn.usage.on, learnUsage(o))
	}
	if _, _, _, err := parseSchedulerFlags([]string{"-h"}, "", io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// TestSchedulerDeploymentArgs parses deploy/scheduler's Deployment args
// with the real flag set.
func TestSchedulerDeploymentArgs(t *testing.T) {
	objs, err := manifest.DecodeFile("../../deploy/scheduler/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		d, ok := o.Object.(*appsv1.Deployment)
		if !ok {
			continue
		}
		args := d.Spec.Template.Spec.Containers[0].Args
		if len(args) == 0 || args[0] != "scheduler" {
			t.Fatalf("args %v: want the scheduler subcommand first", args)
		}
		if _, _, _, err := parseSchedulerFlags(args[1:], "gpud", io.Discard); err != nil {
			t.Fatalf("deployment args %v: %v", args, err)
		}
		return
	}
	t.Fatal("no Deployment in deploy/scheduler/deployment.yaml")
}
