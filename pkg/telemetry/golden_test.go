package telemetry_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/procattr"
	"github.com/gpud/gpud/pkg/telemetry"
	"github.com/gpud/gpud/pkg/timeslice"
)

var update = flag.Bool("update", false, "rewrite testdata/*.prom golden files")

const (
	uidTrain = "00000000-0000-4000-8000-000000000001"
	uidA     = "00000000-0000-4000-8000-00000000000a"
	uidB     = "00000000-0000-4000-8000-00000000000b"
	uidWeb   = "00000000-0000-4000-8000-00000000000c"
)

func ctrID(c byte) string { return strings.Repeat(string(c), 64) }

// scene is a dgx-h100 at a fixed time: GPU 0 held whole by one pod, GPU 1
// time-sliced between two pods, GPU 7 in MIG mode with two 1g.10gb devices
// (one held by a pod), processes on each, cgroups and pod log dirs in a
// temp dir, and every field sampled twice, 5s apart (GPM profiling
// fields need two samples).
func scene(t *testing.T) (*rig, *telemetry.Sampler) {
	t.Helper()
	r := newRig(t)
	for i := range 8 {
		r.fieldValues(i)
	}
	r.enableMIG(t, 7, 2)
	inv := r.staticInventory(t)
	g, _ := inv()
	gpu0, gpu1, mig0 := g.GPUs[0].UUID, g.GPUs[1].UUID, g.GPUs[7].MIGDevices[0].UUID

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.node.AddProcess(0, 1001, 10<<30))
	must(r.node.AddProcess(1, 2001, 4<<30))
	must(r.node.AddProcess(1, 2002, 6<<30))
	must(r.node.AddProcess(2, 4001, 1<<30)) // a host process, in no pod
	must(r.node.AddMIGProcess(mig0, 3001, 2<<30))

	root := t.TempDir()
	proc, logs := filepath.Join(root, "proc"), filepath.Join(root, "pods")
	cgroups := map[string]string{
		"1001": "0::/kubepods.slice/kubepods-pod" + strings.ReplaceAll(uidTrain, "-", "_") + ".slice/cri-containerd-" + ctrID('1') + ".scope\n",
		"2001": "0::/kubepods/burstable/pod" + uidA + "/" + ctrID('a') + "\n",
		"2002": "11:memory:/kubepods/besteffort/pod" + uidB + "/crio-" + ctrID('b') + "\n1:name=systemd:/kubepods/besteffort/pod" + uidB + "/crio-" + ctrID('b') + "\n",
		"3001": "0::/kubepods/pod" + uidWeb + "/" + ctrID('c') + "\n",
		"4001": "0::/system.slice/train.service\n",
	}
	for pid, cg := range cgroups {
		must(os.MkdirAll(filepath.Join(proc, pid), 0o755))
		must(os.WriteFile(filepath.Join(proc, pid, "cgroup"), []byte(cg), 0o644))
	}
	// The web pod has no log dir: its process is named through the MIG
	// device's only holder.
	for _, d := range []string{"ml_train-0_" + uidTrain, "team-a_pod-a_" + uidA, "team-b_pod-b_" + uidB} {
		must(os.MkdirAll(filepath.Join(logs, d), 0o755))
	}
	pods := &fakeLister{as: []podresources.Assignment{
		{Namespace: "ml", Pod: "train-0", Container: "trainer", ResourceName: "nvidia.com/gpu", DeviceIDs: []string{gpu0}},
		{Namespace: "team-a", Pod: "pod-a", Container: "app", ResourceName: "nvidia.com/gpu.shared", DeviceIDs: []string{timeslice.ReplicaID(gpu1, 0), timeslice.ReplicaID(gpu1, 1)}},
		{Namespace: "team-b", Pod: "pod-b", Container: "app", ResourceName: "nvidia.com/gpu.shared", DeviceIDs: []string{timeslice.ReplicaID(gpu1, 2)}},
		{Namespace: "web", Pod: "infer", Container: "server", ResourceName: "nvidia.com/mig-1g.10gb", DeviceIDs: []string{mig0}},
	}}
	s := r.sampler(t, inv, telemetry.Attribution{
		Pods:  pods,
		Procs: procattr.Resolver{ProcRoot: proc},
		Names: procattr.PodLogs{Root: logs},
	}, telemetry.Config{})
	s.Sweep(t.Context())
	// A second sweep one Interval later gives GPM its second sample.
	r.clk.Advance(5 * time.Second)
	s.Sweep(t.Context())
	t.Cleanup(s.Close)
	return r, s
}

// withoutBuildInfo drops gpud_build_info, whose goversion label follows
// the toolchain.
func withoutBuildInfo(text []byte) []byte {
	var out [][]byte
	for _, l := range bytes.SplitAfter(text, []byte("\n")) {
		if !bytes.Contains(l, []byte("gpud_build_info")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, nil)
}

func TestGolden(t *testing.T) {
	_, s := scene(t)
	for _, compat := range []telemetry.Compat{telemetry.CompatDCGM, telemetry.CompatNative} {
		t.Run(string(compat), func(t *testing.T) {
			text := scrape(t, telemetry.NewCollector(s, compat, "test"))
			parse(t, text)
			got := withoutBuildInfo(text)
			path := filepath.Join("testdata", "dgx-h100-"+string(compat)+".prom")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("scrape differs from %s (go test -update rewrites it); got:\n%s", path, got)
			}
		})
	}
}

func TestPromtool(t *testing.T) {
	_, s := scene(t)
	for _, compat := range []telemetry.Compat{telemetry.CompatDCGM, telemetry.CompatNative, telemetry.CompatBoth} {
		t.Run(string(compat), func(t *testing.T) {
			promtoolCheck(t, scrape(t, telemetry.NewCollector(s, compat, "test")))
		})
	}
}
