package telemetry_test

import (
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/procattr"
	"github.com/gpud/gpud/pkg/telemetry"
	"github.com/gpud/gpud/pkg/timeslice"
)

// discardWriter is a ResponseWriter that drops the body.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// fakeProcs attributes every pid to a container of its own pod.
type fakeProcs struct{}

func (fakeProcs) Lookup(pid uint32) (procattr.Container, error) {
	return procattr.Container{PodUID: fmt.Sprintf("00000000-0000-4000-8000-%012d", pid), ContainerID: fmt.Sprintf("%064d", pid)}, nil
}

// fakeNames names the pods fakeProcs makes.
type fakeNames struct{ pids []uint32 }

func (f fakeNames) Pods() (map[string]procattr.PodRef, error) {
	out := map[string]procattr.PodRef{}
	for _, pid := range f.pids {
		uid := fmt.Sprintf("00000000-0000-4000-8000-%012d", pid)
		out[uid] = procattr.PodRef{Namespace: "team", Name: fmt.Sprintf("pod-%d", pid), UID: uid}
	}
	return out, nil
}

// benchScrape serves /metrics from the collector as the agent does and
// reports the median scrape time and allocations per device.
func benchScrape(b *testing.B, s *telemetry.Sampler) {
	b.Helper()
	devices := len(s.Snapshot().Devices)
	reg := prometheus.NewRegistry()
	reg.MustRegister(telemetry.NewCollector(s, telemetry.CompatDCGM, "bench"))
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	req, _ := http.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	w := &discardWriter{h: http.Header{}}
	times := make([]time.Duration, 0, 1<<16)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		clear(w.h)
		h.ServeHTTP(w, req)
		if len(times) < cap(times) {
			times = append(times, time.Since(start))
		}
		n++
	}
	runtime.ReadMemStats(&after)
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(n)/float64(devices), "allocs/device")
	b.ReportMetric(float64(devices), "devices")
}

// BenchmarkScrape is one scrape of a dgx-h100: every GPU in MIG mode with
// seven 1g.10gb devices (56 MIG devices), and 8 GPUs with 16 replicas each
// allocated to 16 pods, each running a process. Targets: p50 under 2 ms,
// under 500 allocations per device.
func BenchmarkScrape(b *testing.B) {
	for _, gpm := range []bool{false, true} {
		b.Run(fmt.Sprintf("gpm=%v", gpm), func(b *testing.B) { benchScrapes(b, gpm) })
	}
}

// sweep samples once, or with gpm twice 5s apart so the 12 GPM profiling
// fields are exported on every GPU and MIG device.
func sweep(b *testing.B, r *rig, s *telemetry.Sampler, gpm bool) {
	b.Helper()
	s.Sweep(b.Context())
	if gpm {
		r.clk.Advance(5 * time.Second)
		s.Sweep(b.Context())
		if !s.Snapshot().Devices[0].GPM {
			b.Fatal("no GPM fields after two sweeps")
		}
	}
	b.Cleanup(s.Close)
}

func benchScrapes(b *testing.B, gpm bool) {
	b.Run("mig-56", func(b *testing.B) {
		r := newRig(b)
		for i := range 8 {
			r.enableMIG(b, i, 7)
		}
		inv := r.staticInventory(b)
		g, _ := inv()
		var as []podresources.Assignment
		for _, gp := range g.GPUs {
			for j, m := range gp.MIGDevices {
				as = append(as, podresources.Assignment{Namespace: "team", Pod: fmt.Sprintf("mig-%d-%d", gp.Index, j), Container: "main", ResourceName: "nvidia.com/mig-1g.10gb", DeviceIDs: []string{m.UUID}})
			}
		}
		s := r.sampler(b, inv, telemetry.Attribution{Pods: &fakeLister{as: as}}, telemetry.Config{})
		sweep(b, r, s, gpm)
		if n := len(s.Snapshot().Devices); n != 64 {
			b.Fatalf("devices = %d, want 8 GPUs + 56 MIG devices", n)
		}
		benchScrape(b, s)
	})
	b.Run("replicas-8x16", func(b *testing.B) {
		r := newRig(b)
		inv := r.staticInventory(b)
		g, _ := inv()
		var as []podresources.Assignment
		var pids []uint32
		for _, gp := range g.GPUs {
			for j := range 16 {
				pid := uint32(10000 + gp.Index*100 + j)
				pids = append(pids, pid)
				if err := r.node.AddProcess(gp.Index, pid, 1<<30); err != nil {
					b.Fatal(err)
				}
				as = append(as, podresources.Assignment{Namespace: "team", Pod: fmt.Sprintf("pod-%d", pid), Container: "main",
					ResourceName: "nvidia.com/gpu.shared", DeviceIDs: []string{timeslice.ReplicaID(gp.UUID, j)}})
			}
		}
		s := r.sampler(b, inv, telemetry.Attribution{Pods: &fakeLister{as: as}, Procs: fakeProcs{}, Names: fakeNames{pids}}, telemetry.Config{})
		sweep(b, r, s, gpm)
		if n := len(s.Snapshot().Processes); n != 128 {
			b.Fatalf("processes = %d, want 128", n)
		}
		benchScrape(b, s)
	})
}

// BenchmarkSweepProcesses is the cost of per-process sampling in one sweep
// (process lists, per-process SM utilization, attribution to pods): a
// sweep of a dgx-h100 with and without one process per device, as 56 MIG
// devices (8 GPUs × seven 1g.10gb: the driver has no per-process
// utilization there, the parents are asked and say so) and as 8 GPUs
// with 16 time-sliced pods each (per-process SM utilization reported).
func BenchmarkSweepProcesses(b *testing.B) {
	for _, procs := range []bool{false, true} {
		b.Run(fmt.Sprintf("mig-56/procs=%v", procs), func(b *testing.B) {
			r := newRig(b)
			for i := range 8 {
				r.enableMIG(b, i, 7)
			}
			inv := r.staticInventory(b)
			g, _ := inv()
			var as []podresources.Assignment
			var pids []uint32
			for _, gp := range g.GPUs {
				for j, m := range gp.MIGDevices {
					pid := uint32(20000 + gp.Index*100 + j)
					if procs {
						if err := r.node.AddMIGProcess(m.UUID, pid, 1<<30); err != nil {
							b.Fatal(err)
						}
						pids = append(pids, pid)
					}
					as = append(as, podresources.Assignment{Namespace: "team", Pod: fmt.Sprintf("pod-%d", pid), Container: "main", ResourceName: "nvidia.com/mig-1g.10gb", DeviceIDs: []string{m.UUID}})
				}
			}
			s := r.sampler(b, inv, telemetry.Attribution{Pods: &fakeLister{as: as}, Procs: fakeProcs{}, Names: fakeNames{pids}}, telemetry.Config{})
			benchSweep(b, s, len(pids))
		})
		b.Run(fmt.Sprintf("replicas-8x16/procs=%v", procs), func(b *testing.B) {
			r := newRig(b)
			inv := r.staticInventory(b)
			g, _ := inv()
			var as []podresources.Assignment
			var pids []uint32
			for _, gp := range g.GPUs {
				for j := range 16 {
					pid := uint32(10000 + gp.Index*100 + j)
					if procs {
						if err := r.node.AddProcess(gp.Index, pid, 1<<30); err != nil {
							b.Fatal(err)
						}
						pids = append(pids, pid)
					}
					as = append(as, podresources.Assignment{Namespace: "team", Pod: fmt.Sprintf("pod-%d", pid), Container: "main",
						ResourceName: "nvidia.com/gpu.shared", DeviceIDs: []string{timeslice.ReplicaID(gp.UUID, j)}})
				}
			}
			s := r.sampler(b, inv, telemetry.Attribution{Pods: &fakeLister{as: as}, Procs: fakeProcs{}, Names: fakeNames{pids}}, telemetry.Config{})
			benchSweep(b, s, len(pids))
		})
	}
}

// benchSweep times whole sweeps, after one that fills the caches, and
// checks the processes' SM utilization is reported where the driver has it.
func benchSweep(b *testing.B, s *telemetry.Sampler, procs int) {
	b.Helper()
	b.Cleanup(s.Close)
	s.Sweep(b.Context())
	snap := s.Snapshot()
	if len(snap.Processes) != procs {
		b.Fatalf("processes = %d, want %d", len(snap.Processes), procs)
	}
	for _, p := range snap.Processes {
		if p.HasSMUtil != (p.GIID < 0) {
			b.Fatalf("pid %d on GI %d: SM utilization reported %v, want only off MIG", p.PID, p.GIID, p.HasSMUtil)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Sweep(b.Context())
	}
}
