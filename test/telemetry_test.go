package test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpud/gpud/internal/testkit/promtooltest"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/telemetry"
	"github.com/gpud/gpud/pkg/timeslice"
	"github.com/gpud/gpud/test/kubeletstub"
)

// telDCGMNames are the dcgm-exporter families every healthy GPU must have.
var telDCGMNames = []string{
	"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
	"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED",
	"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
	"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP",
	"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK",
	"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
	"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
	"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
}

// telServeKubelet serves resp on a fake PodResources API and returns its
// socket.
func telServeKubelet(t *testing.T, resp *podresourcesv1.ListPodResourcesResponse) string {
	t.Helper()
	k, err := kubeletstub.StartPodResources(resp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k.Socket()
}

// telAgent runs a sampler over a simulated dgx-h100 with the PodResources
// client on socket, and serves /metrics over HTTP as the agent does.
func telAgent(t *testing.T, socket string) (string, []gpu.GPU) {
	t.Helper()
	node := simnode.NewBuiltin("dgx-h100")
	disc := discovery.New(node, "dgx-h100", nil)
	inv, err := disc.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	pods := podresources.New(socket)
	t.Cleanup(func() { _ = pods.Close() })
	s, err := telemetry.NewSampler(node, func() (gpu.Inventory, bool) { return inv, true },
		telemetry.Attribution{Pods: pods}, telemetry.Config{
			// Generous timeouts: the test machine may be loaded.
			Interval: 50 * time.Millisecond, CallTimeout: 10 * time.Second, StaleAfter: time.Minute, Hostname: "dgx-h100",
		}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "sampler", s.Run)
	reg := prometheus.NewRegistry()
	reg.MustRegister(telemetry.NewCollector(s, telemetry.CompatDCGM, "test"))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics", inv.GPUs
}

// telScrape GETs url until ready accepts the parsed families, and returns
// the text and families.
func telScrape(t *testing.T, url string, ready func(map[string]*dto.MetricFamily) bool) ([]byte, map[string]*dto.MetricFamily) {
	t.Helper()
	var body []byte
	var mfs map[string]*dto.MetricFamily
	testwait.ForErr(t, waitTimeout, "/metrics to get ready", func() error {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		if mfs, err = p.TextToMetricFamilies(bytes.NewReader(body)); err != nil {
			t.Fatalf("expfmt parse: %v", err)
		}
		if !ready(mfs) {
			return fmt.Errorf("not ready; last scrape:\n%s", body)
		}
		return nil
	})
	return body, mfs
}

// telLabels returns the label maps of a family's series.
func telLabels(mf *dto.MetricFamily) []map[string]string {
	var out []map[string]string
	for _, m := range mf.GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		out = append(out, l)
	}
	return out
}

func TestTelemetryMetricsOverHTTP(t *testing.T) {
	// GPU 0 whole to one pod; GPU 3 time-sliced: 3 replicas to pod a, 1 to pod b.
	node := simnode.NewBuiltin("dgx-h100")
	gpu0, gpu3 := node.Device(0).UUID(), node.Device(3).UUID()
	sock := telServeKubelet(t, &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Name: "train", Namespace: "ml", Containers: []*podresourcesv1.ContainerResources{{Name: "main", Devices: []*podresourcesv1.ContainerDevices{
			{ResourceName: "nvidia.com/gpu", DeviceIds: []string{gpu0}}}}}},
		{Name: "a", Namespace: "web", Containers: []*podresourcesv1.ContainerResources{{Name: "srv", Devices: []*podresourcesv1.ContainerDevices{
			{ResourceName: "nvidia.com/gpu.shared", DeviceIds: []string{timeslice.ReplicaID(gpu3, 0), timeslice.ReplicaID(gpu3, 1), timeslice.ReplicaID(gpu3, 2)}}}}}},
		{Name: "b", Namespace: "web", Containers: []*podresourcesv1.ContainerResources{{Name: "srv", Devices: []*podresourcesv1.ContainerDevices{
			{ResourceName: "nvidia.com/gpu.shared", DeviceIds: []string{timeslice.ReplicaID(gpu3, 3)}}}}}},
	}})
	url, gpus := telAgent(t, sock)
	text, mfs := telScrape(t, url, func(m map[string]*dto.MetricFamily) bool {
		up := m["gpud_podresources_up"]
		return up != nil && up.GetMetric()[0].GetGauge().GetValue() == 1 && m["DCGM_FI_DEV_GPU_UTIL"] != nil
	})

	for _, name := range telDCGMNames {
		mf := mfs[name]
		if mf == nil {
			t.Errorf("%s missing", name)
			continue
		}
		seen := map[string]bool{}
		for _, l := range telLabels(mf) {
			for _, k := range []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"} {
				if l[k] == "" {
					t.Errorf("%s series %v lacks label %s", name, l, k)
				}
			}
			seen[l["UUID"]] = true
			if l["UUID"] == gpu0 && (l["namespace"] != "ml" || l["pod"] != "train" || l["container"] != "main") {
				t.Errorf("%s on GPU 0 labels %v, want pod ml/train/main", name, l)
			}
			if l["UUID"] == gpu3 && l["pod"] != "" {
				t.Errorf("%s on shared GPU 3 has pod %q, want none", name, l["pod"])
			}
		}
		for _, g := range gpus {
			if !seen[g.UUID] {
				t.Errorf("%s has no series for GPU %d", name, g.Index)
			}
		}
	}
	var replicas float64 = -1
	for _, m := range mfs["gpud_device_replicas_allocated"].GetMetric() {
		for _, p := range m.GetLabel() {
			if p.GetName() == "UUID" && p.GetValue() == gpu3 {
				replicas = m.GetGauge().GetValue()
			}
		}
	}
	if replicas != 4 {
		t.Errorf("gpud_device_replicas_allocated for GPU 3 = %v, want 4", replicas)
	}
	promtooltest.CheckMetrics(t, text, promtooltest.DCGMNaming)
}

func TestTelemetryWithoutKubelet(t *testing.T) {
	url, gpus := telAgent(t, filepath.Join(shortDir(t), "no-kubelet.sock"))
	_, mfs := telScrape(t, url, func(m map[string]*dto.MetricFamily) bool {
		e := m["gpud_attribution_errors_total"]
		if e == nil || m["DCGM_FI_DEV_GPU_UTIL"] == nil {
			return false
		}
		for _, l := range telLabels(e) {
			if l["source"] == "podresources" {
				return true
			}
		}
		return false
	})
	util := telLabels(mfs["DCGM_FI_DEV_GPU_UTIL"])
	if len(util) != len(gpus) {
		t.Errorf("DCGM_FI_DEV_GPU_UTIL has %d series, want %d", len(util), len(gpus))
	}
	for _, l := range util {
		if l["pod"] != "" {
			t.Errorf("series %v has pod labels without a kubelet", l)
		}
	}
	for _, m := range mfs["gpud_attribution_errors_total"].GetMetric() {
		if m.GetLabel()[0].GetValue() == "podresources" && m.GetCounter().GetValue() < 1 {
			t.Errorf("gpud_attribution_errors_total{source=podresources} = %v, want >= 1", m.GetCounter().GetValue())
		}
	}
}
