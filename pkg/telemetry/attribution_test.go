package telemetry_test

import (
	"testing"

	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/telemetry"
)

func TestAttribution(t *testing.T) {
	_, s := scene(t)
	mfs := parse(t, scrape(t, telemetry.NewCollector(s, telemetry.CompatDCGM, "test")))
	procs := []struct {
		name                     string
		pid                      string
		gpu, giid                string
		namespace, pod, ctr, cid string
		bytes                    float64
	}{
		{name: "whole GPU, systemd containerd cgroup", pid: "1001", gpu: "0", namespace: "ml", pod: "train-0", ctr: "trainer", cid: ctrID('1'), bytes: 10 << 30},
		{name: "shared GPU, first pod (cgroupfs v2)", pid: "2001", gpu: "1", namespace: "team-a", pod: "pod-a", ctr: "app", cid: ctrID('a'), bytes: 4 << 30},
		{name: "shared GPU, second pod (cri-o, cgroup v1)", pid: "2002", gpu: "1", namespace: "team-b", pod: "pod-b", ctr: "app", cid: ctrID('b'), bytes: 6 << 30},
		{name: "MIG device, named by its only holder", pid: "3001", gpu: "7", giid: "1", namespace: "web", pod: "infer", ctr: "server", cid: ctrID('c'), bytes: 2 << 30},
		{name: "host process", pid: "4001", gpu: "2"},
	}
	for _, p := range procs {
		t.Run(p.name, func(t *testing.T) {
			want := map[string]string{"pid": p.pid, "gpu": p.gpu, "GPU_I_ID": p.giid, "namespace": p.namespace, "pod": p.pod, "container": p.ctr, "container_id": p.cid}
			v, ok := series(mfs, "gpud_process_memory_used_bytes", want)
			if !ok {
				t.Fatalf("no gpud_process_memory_used_bytes with %v", want)
			}
			if p.bytes != 0 && v != p.bytes {
				t.Errorf("gpud_process_memory_used_bytes = %v, want %v", v, p.bytes)
			}
		})
	}

	t.Run("device labels", func(t *testing.T) {
		// Held by one container: pod labels on the DCGM series.
		if _, ok := series(mfs, "DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "0", "namespace": "ml", "pod": "train-0", "container": "trainer"}); !ok {
			t.Error("GPU 0 (one holder) lacks pod labels")
		}
		if _, ok := series(mfs, "DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "7", "GPU_I_ID": "1", "GPU_I_PROFILE": "1g.10gb", "pod": "infer"}); !ok {
			t.Error("MIG device GI 1 (one holder) lacks pod labels")
		}
		// Shared by two pods: one series, no pod labels, so sums stay right.
		mf := mfs["DCGM_FI_DEV_FB_USED"]
		n := 0
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "gpu" && l.GetValue() == "1" {
					n++
					for _, l2 := range m.GetLabel() {
						if l2.GetName() == "pod" {
							t.Errorf("shared GPU 1 series has pod=%q", l2.GetValue())
						}
					}
				}
			}
		}
		if n != 1 {
			t.Errorf("GPU 1 has %d DCGM_FI_DEV_FB_USED series, want 1", n)
		}
		if v, _ := series(mfs, "gpud_device_replicas_allocated", map[string]string{"gpu": "1", "GPU_I_ID": ""}); v != 3 {
			t.Errorf("gpud_device_replicas_allocated{gpu=1} = %v, want 3", v)
		}
		if v, _ := series(mfs, "gpud_device_containers_allocated", map[string]string{"gpu": "1", "GPU_I_ID": ""}); v != 2 {
			t.Errorf("gpud_device_containers_allocated{gpu=1} = %v, want 2", v)
		}
	})
}

func TestAttributionWithoutKubelet(t *testing.T) {
	r := newRig(t)
	inv := r.staticInventory(t)
	if err := r.node.AddProcess(0, 1001, 1<<30); err != nil {
		t.Fatal(err)
	}
	pods := &fakeLister{err: podresources.ErrUnavailable}
	s := r.sampler(t, inv, telemetry.Attribution{Pods: pods}, telemetry.Config{})
	s.Sweep(t.Context())
	s.Sweep(t.Context())
	mfs := parse(t, scrape(t, telemetry.NewCollector(s, telemetry.CompatDCGM, "test")))
	if _, ok := series(mfs, "DCGM_FI_DEV_GPU_UTIL", map[string]string{"gpu": "0"}); !ok {
		t.Error("DCGM_FI_DEV_GPU_UTIL missing: a missing kubelet must not fail the scrape")
	}
	if v, _ := series(mfs, "gpud_attribution_errors_total", map[string]string{"source": "podresources"}); v != 2 {
		t.Errorf("gpud_attribution_errors_total{source=podresources} = %v, want 2", v)
	}
	if v, ok := series(mfs, "gpud_podresources_up", nil); !ok || v != 0 {
		t.Errorf("gpud_podresources_up = %v, want 0", v)
	}
	if v, _ := series(mfs, "gpud_process_memory_used_bytes", map[string]string{"pid": "1001", "pod": ""}); v != 1<<30 {
		t.Errorf("process 1001 = %v, want listed without pod labels", v)
	}

	// The kubelet comes back: labels return on the next sweep.
	g, _ := inv()
	pods.mu.Lock()
	pods.err = nil
	pods.as = []podresources.Assignment{{Namespace: "ns", Pod: "p", Container: "c", ResourceName: "nvidia.com/gpu", DeviceIDs: []string{g.GPUs[0].UUID}}}
	pods.mu.Unlock()
	s.Sweep(t.Context())
	mfs = parse(t, scrape(t, telemetry.NewCollector(s, telemetry.CompatDCGM, "test")))
	if _, ok := series(mfs, "DCGM_FI_DEV_GPU_UTIL", map[string]string{"gpu": "0", "pod": "p"}); !ok {
		t.Error("pod labels did not return after the kubelet did")
	}
}
