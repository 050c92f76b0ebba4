package test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestMPSDeployShm: the agent's /dev/shm is the host's <mps root>/shm,
// the directory containers sharing a GPU mount as theirs (pkg/mps.ShmDir),
// in deploy/daemonset and in the chart wherever MPS runs in device-plugin
// mode, following agent.mps.root; with MPS off it is left alone.
func TestMPSDeployShm(t *testing.T) {
	shmMount := func(t *testing.T, ds *appsv1.DaemonSet) (string, bool) {
		t.Helper()
		vols := map[string]string{}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.HostPath != nil {
				vols[v.Name] = v.HostPath.Path
			}
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			for _, m := range c.VolumeMounts {
				if m.MountPath == "/dev/shm" {
					if m.ReadOnly {
						t.Errorf("/dev/shm mounted read-only: the daemons write their segments there")
					}
					return vols[m.Name], true
				}
			}
		}
		return "", false
	}
	raw, ok := helmManifest(t, "../deploy/daemonset/daemonset.yaml", "DaemonSet/gpud").(*appsv1.DaemonSet)
	if !ok {
		t.Fatal("deploy/daemonset/daemonset.yaml holds no DaemonSet")
	}
	if host, ok := shmMount(t, raw); !ok || host != "/run/gpud/mps/shm" {
		t.Errorf("deploy/daemonset /dev/shm from %q (present %v), want /run/gpud/mps/shm", host, ok)
	}
	tests := []struct {
		name   string
		mps    map[string]any
		want   string
		absent bool
	}{
		{name: "default", mps: map[string]any{}, want: "/run/gpud/mps/shm"},
		{name: "own root", mps: map[string]any{"root": "/var/lib/gpud-mps/"}, want: "/var/lib/gpud-mps/shm"},
		{name: "mps off", mps: map[string]any{"enabled": false}, absent: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ds, _, _ := helmAgent(t, helmMustRender(t, map[string]any{"agent": map[string]any{"mps": tc.mps}}, false))
			host, ok := shmMount(t, ds)
			if tc.absent {
				if ok {
					t.Errorf("/dev/shm mounted from %s with MPS off", host)
				}
				return
			}
			if !ok || host != tc.want {
				t.Errorf("/dev/shm from %q (present %v), want %s", host, ok, tc.want)
			}
		})
	}
}
