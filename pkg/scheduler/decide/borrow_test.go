package decide

import (
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpud/gpud/internal/testkit/schedtest"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/gputel"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// memoryLimit sets the pod's claim's opaque GPUConfig memoryLimit: it may
// borrow above its request up to limit.
func memoryLimit(limit string) podOpt {
	return func(x *plan.Pod) {
		x.Claims[0].Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: dra.DriverName, Parameters: runtime.RawExtension{
				Raw: []byte(`{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memoryLimit":"` + limit + `"}`)}},
		}}}
	}
}

// TestBorrowerEvictedForRequest: on a dgx-h100 whose GPUs hold fractions
// with driver memory limits (memoryLimitMode "driver"), a borrower (20Gi
// asked, 70Gi limit) measured at 60Gi does not keep a 40Gi fraction off
// its GPU, which fits there by requests: the pod binds, and its bind says
// the driver evicts the borrower for it. With the GPU in MPS mode the
// measured use holds the fraction out, as before.
func TestBorrowerEvictedForRequest(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		binds bool
	}{{"driver", true}, {"mps", false}} {
		t.Run(tc.mode, func(t *testing.T) {
			e := newEnv(t)
			st := simState(t, "dgx-h100")
			st.MemoryLimitModes = map[string]string{}
			for _, g := range st.Inventory.GPUs {
				st.MemoryLimitModes[g.UUID] = tc.mode
			}
			e.slices = append(e.slices, toSlices(t, "a", st)...)
			e.nodes = append(e.nodes, schedtest.Node("a", nil))
			e.pod("seven", reqs(gpus(7)), prio(1000))
			e.pod("borrower", reqs(fraction("20Gi")), memoryLimit("70Gi"))
			p := e.decide(Config{})
			if len(p.Binds) != 2 {
				t.Fatalf("fill: %+v", p.Pending)
			}
			dev := strings.TrimPrefix(devicesOf(bindOf(t, p, "borrower"))[0], "a/")
			e.apply(p)
			total := e.memoryOf("a", dev)
			used := 60 * gib
			e.report("a", dev, gputel.Device{MemoryUsedBytes: uint64(used), MemoryTotalBytes: uint64(total),
				ClaimMemoryBytes: map[string]uint64{"claim-uid-borrower": uint64(used)}})
			e.pod("owner", reqs(fraction("40Gi")))
			p = e.decide(Config{})
			if !tc.binds {
				if w, ok := pendingOf(p, "owner"); !ok {
					t.Fatalf("owner bound on a GPU in MPS mode whose borrower uses 60Gi: %+v", p.Binds)
				} else {
					t.Logf("owner: %s", w.Message)
				}
				return
			}
			b := bindOf(t, p, "owner")
			want := fmt.Sprintf("the driver evicts borrowers (tenants above their memory request) to give this pod its memory: %s on a: up to %s (from telemetry)",
				dev, gibString(used+40*gib-total))
			if b.Note != want {
				t.Errorf("owner's bind note %q, want %q", b.Note, want)
			}
			t.Logf("owner bound: %s", b.Note)
		})
	}
}
