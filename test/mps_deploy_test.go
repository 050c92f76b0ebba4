package test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestMPSDeployShm: the agent's /dev/shm is the host's <mps root>/shm,
// the directory containers sharing a GPU mount as theirs (pkg/mps.ShmDir),
// and the NVIDIA runtime is asked for the compute capability (which brings
// nvidia-cuda-mps-control and -server), in deploy/daemonset and in the
// chart wherever MPS runs in device-plugin mode, following agent.mps.root;
// with MPS off both are left alone.
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
	compute := func(ds *appsv1.DaemonSet) bool {
		for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "NVIDIA_DRIVER_CAPABILITIES" {
				return e.Value == "compute,utility"
			}
		}
		return false
	}
	raw, ok := helmManifest(t, "../deploy/daemonset/daemonset.yaml", "DaemonSet/gpud").(*appsv1.DaemonSet)
	if !ok {
		t.Fatal("deploy/daemonset/daemonset.yaml holds no DaemonSet")
	}
	if host, ok := shmMount(t, raw); !ok || host != "/run/gpud/mps/shm" {
		t.Errorf("deploy/daemonset /dev/shm from %q (present %v), want /run/gpud/mps/shm", host, ok)
	}
	if !compute(raw) {
		t.Error("deploy/daemonset does not ask the NVIDIA runtime for compute,utility")
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
			if compute(ds) == tc.absent {
				t.Errorf("NVIDIA_DRIVER_CAPABILITIES compute,utility set: %v, want %v", compute(ds), !tc.absent)
			}
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
