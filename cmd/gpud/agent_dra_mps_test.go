package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/mps"
	"github.com/gpud/gpud/pkg/mps/mpsctl"
	"github.com/gpud/gpud/pkg/mps/mpstest"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/timeslice"
)

// fractionClaim is a claim allocated a 20Gi fraction of gpu-0.
func fractionClaim(uid string) *resourceapi.ResourceClaim {
	share := types.UID("share-" + uid)
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	c.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: dra.DriverName, Pool: "dgx-h100", Device: dra.GPUDeviceName(0), ShareID: &share,
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("20Gi")},
	}}
	return c
}

// TestDRAFractionGetsMPS wires the DRA driver and the MPS agent as the
// agent does, on the simulated dgx-h100 with the stand-in control program:
// preparing a fraction of gpu-0 starts gpu-0's daemon, sets it
// EXCLUSIVE_PROCESS and mounts its pipe dir in the claim's CDI spec;
// unpreparing it stops the daemon and restores DEFAULT.
func TestDRAFractionGetsMPS(t *testing.T) {
	root, err := os.MkdirTemp("", "mps") // short: the daemon's socket lives here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	var cdiDir string
	w := startWiredDriver(t, func(_ *testing.T, _ *simnode.Node, _ *draOptions, deps *draDeps) {
		deps.mpsRoot = root
		cdiDir = deps.cdiDir
	})
	driver := filepath.Join(t.TempDir(), "driver")
	if err := mpstest.Build(filepath.Join(driver, mps.ControlBinary)); err != nil {
		t.Fatal(err)
	}
	o := mpsOptions{enabled: true, driverRoot: driver, root: root}
	rt := timeslice.NewRuntime(timeslice.RuntimeConfig{Inventory: w.store.Current})
	m, err := newMPSAgent(&o, true, w.node, rt, w.store, quietLog())
	if err != nil || m.Root() != root {
		t.Fatalf("mps agent: root %q, err %v", m.Root(), err)
	}
	m.ShareFractions(preparedFractions(w.drv.Preparer()))
	testwait.Run(t, "mps", m.Run)

	gpu0 := w.node.Device(0).UUID()
	mode := func() nvml.ComputeMode {
		d, _ := w.node.DeviceGetHandleByIndex(0)
		md, _ := d.GetComputeMode()
		return md
	}
	sock := filepath.Join(mps.PipeDir(root, gpu0), "control")
	time.Sleep(2 * mpsctl.PollInterval) // nothing prepared: nothing shared
	if _, err := os.Stat(sock); err == nil || mode() != nvml.COMPUTEMODE_DEFAULT {
		t.Fatalf("before any fraction: daemon socket %v, mode %v; want none and DEFAULT", err, mode())
	}

	res, err := w.drv.Preparer().Prepare(t.Context(), []*resourceapi.ResourceClaim{fractionClaim("frac-a")})
	if err != nil || res["frac-a"].Err != nil {
		t.Fatalf("prepare: %v %v", err, res["frac-a"].Err)
	}
	spec, err := os.ReadFile(filepath.Join(cdiDir, "gpud-dra-frac-a.json"))
	if err != nil || !strings.Contains(string(spec), mps.PipeDir(root, gpu0)) || !strings.Contains(string(spec), "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps") {
		t.Errorf("claim's CDI spec does not mount gpu-0's pipe dir: %v\n%s", err, spec)
	}
	testwait.ForErr(t, 10*time.Second, "gpu-0's daemon and EXCLUSIVE_PROCESS", func() error {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return err
		}
		_ = c.Close()
		if mode() != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
			return errors.New("compute mode not yet EXCLUSIVE_PROCESS")
		}
		return nil
	})

	testwait.ForErr(t, 10*time.Second, "the readyz line", func() error {
		if got, want := m.WithStatus(nil)(), "mps: 1 of 1 daemons running, 1 GPUs EXCLUSIVE_PROCESS"; got != want {
			return fmt.Errorf("readyz line = %q, want %q", got, want)
		}
		return nil
	})
	if got := m.WithStatus(func() string { return "enforce: ok" })(); !strings.HasPrefix(got, "enforce: ok\nmps: ") {
		t.Errorf("readyz lines = %q, want enforcement's then mps's", got)
	}

	ures, err := w.drv.Preparer().Unprepare(t.Context(), []kubeletplugin.NamespacedObject{{UID: "frac-a"}})
	if err != nil || ures["frac-a"] != nil {
		t.Fatalf("unprepare: %v %v", err, ures["frac-a"])
	}
	testwait.ForErr(t, 10*time.Second, "gpu-0's daemon gone and DEFAULT", func() error {
		if _, err := os.Stat(sock); err == nil {
			return errors.New("daemon still listens")
		}
		if mode() != nvml.COMPUTEMODE_DEFAULT {
			return errors.New("compute mode not yet DEFAULT")
		}
		return nil
	})
}
